"""Remove what the course made for this learner, and only that: actors, runs, outputs, data copy.

A workshop shares one ``COURSE_STORAGE`` and one cluster, so "the course's" means "this
learner's" (``config.learner()``):

- storage: only ``<COURSE_STORAGE>/course-<learner>`` is emptied, and only when it carries the
  course's ownership record naming this learner (``storage.OWNER_FILE``); everything else in
  ``COURSE_STORAGE`` (``.``, ``/tmp``, a teammate's folder) stays, locally and on ``s3://``;
- actors: only named ``course-*`` actors in the learner's Ray namespace ``course-<learner>``;
- data: never in a lesson. The offline MNIST copy is shared by every learner pointing
  ``COURSE_DATA`` there, so lesson 06 keeps it and says how to remove it (``./build.sh clean --data``).

Deleting a local path is fenced: only strictly inside the learner's storage folder or the build
folder, or the course's own offline MNIST copy. Anything else, a symlink leading out included, is
refused with ``CleanupRefused`` before anything is deleted. The folders themselves stay, emptied.
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.fs as pafs

from course_utils.core.config import ACTOR_PREFIX, build_root, data_root, learner_namespace
from course_utils.core.data import OFFLINE_MARKER

# CleanupRefused is storage's (raydata.write_parquet raises it too).
from course_utils.core.storage import OWNER_FILE, CleanupRefused, Storage, refuse_unless_mine
from course_utils.internals.dashboard import alive_actors


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
    left_alone: list[str] = field(default_factory=list)  # other entries of COURSE_STORAGE, untouched

    @property
    def bytes(self) -> int:
        return sum(r.bytes for r in self.removed)

    def describe(self) -> str:
        verb = "would free" if self.dry_run else "freed"
        actors = "" if self.dry_run else f"{len(self.actors)} actor(s), "  # a dry run deletes files only
        lines = [
            f"Cleanup {verb}: {actors}{len(self.removed)} path(s), "
            f"{human_bytes(self.bytes)} of storage ({self.bytes:,} bytes on disk or in the bucket)"
        ]
        lines += [f"  actor  {name}" for name in self.actors]
        lines += [f"  {r.kind:<9} {human_bytes(r.bytes):>9}  {r.path}" for r in self.removed]
        if self.left_alone:
            shown = ", ".join(Path(p).name or p for p in self.left_alone[:8])
            more = f" and {len(self.left_alone) - 8} more" if len(self.left_alone) > 8 else ""
            lines.append(f"Left alone in COURSE_STORAGE (not yours): {shown}{more}")
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
    """The course's offline MNIST copy under ``COURSE_DATA`` (it carries the offline marker), or None
    for a MNIST the course did not write (a torchvision download, a folder you pointed at)."""

    copy = data_root() / "MNIST"
    if copy.is_symlink() or not (copy / OFFLINE_MARKER).is_file():
        return None
    return copy


def _learner_storage_dir(store: Storage) -> Path | None:
    """This learner's local storage folder (``<COURSE_STORAGE>/course-<learner>``) without creating
    it; None for remote storage."""
    return None if store.remote else Path(store.mine)


def _allowed_roots(store: Storage) -> dict[str, Path]:
    """Local folders whose contents cleanup may delete: the learner's storage folder (local, not a
    symlink), build, data copy."""
    roots: dict[str, Path] = {}
    mine = _learner_storage_dir(store)
    if mine is not None and not mine.is_symlink():
        roots["storage"] = mine.resolve()
    roots["build"] = build_root().resolve()
    copy = offline_data_copy()
    if copy is not None:
        roots["data copy"] = copy.resolve()
    return roots


def _inside(path: Path, root: Path) -> bool:
    return path != root and path.is_relative_to(root)


def check_deletable(path: str | Path, store: Storage) -> tuple[Path, str]:
    """(absolute path, kind) when ``path`` may be deleted; raises ``CleanupRefused`` otherwise.
    The course's folders are this learner's in ``store``, the build folder and the MNIST copy.

    The path must lie strictly inside an allowed root both as written and with symlinks
    resolved, and no symlink under it may lead out of the course's folders.
    """
    lexical = Path(os.path.abspath(Path(path).expanduser()))  # '..' folded, links kept
    roots = _allowed_roots(store)
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


def remove_path(path: str | Path, store: Storage, dry_run: bool = False) -> Removed:
    """Delete one file, symlink or folder the course made (after ``check_deletable``)."""
    target, kind = check_deletable(path, store)
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


def _probe(name: str) -> bool:
    return name.startswith(".write-test-")  # config's write check, mid-flight


def storage_entries(store: Storage) -> list[str]:
    """This learner's entries in ``store``: run directories, fault markers, outputs, Parquet copies
    (not the folder's ownership record). Creates nothing."""
    if store.remote:
        fs, root = store.learner_filesystem(claim=False)
        infos = fs.get_file_info(pafs.FileSelector(root, allow_not_found=True))
        return sorted(f"{store.mine}/{i.base_name}" for i in infos if i.base_name != OWNER_FILE)
    mine = _learner_storage_dir(store)
    if not mine.is_dir():
        return []
    return sorted(str(p) for p in mine.iterdir() if p.name != OWNER_FILE and not _probe(p.name))


def storage_left_alone(store: Storage) -> list[str]:
    """Everything else at the top of ``store`` (teammates' folders, foreign files), which cleanup
    never touches; lesson 06 lists them."""
    if store.remote:
        infos = store.filesystem.get_file_info(pafs.FileSelector(store.root_path, allow_not_found=True))
        names = [i.base_name for i in infos]
    else:
        names = [p.name for p in Path(store.root).iterdir()]
    return sorted(f"{store.root}/{n}" for n in names if n != store.folder and not _probe(n))


def _remove_remote(uri: str, store: Storage, dry_run: bool) -> Removed:
    mine = store.mine
    name = uri[len(mine) + 1 :] if uri.startswith(mine + "/") else ""
    if not name or "/" in name.rstrip("/") or name in (".", "..", OWNER_FILE):
        raise CleanupRefused(f"Refusing to delete {uri}: it is not an entry of your course folder {mine}.")
    fs, root = store.learner_filesystem(claim=False)  # honours COURSE_S3_ENDPOINT, like the runs
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


def clean_storage(store: Storage, dry_run: bool = False) -> list[Removed]:
    """Empty this learner's folder in ``store``, ``<COURSE_STORAGE>/course-<learner>`` (local or
    ``s3://``), only when it carries the course's record for this learner; the folder and record stay.
    Every entry is checked before any is deleted, so a refusal leaves everything in place."""
    entries = storage_entries(store)
    if not entries:
        return []
    if store.remote:
        fs, root = store.learner_filesystem(claim=False)
        refuse_unless_mine(fs, root, store.mine, "empty")
        return [_remove_remote(uri, store, dry_run) for uri in entries]
    mine = _learner_storage_dir(store)
    if mine.is_symlink():
        raise CleanupRefused(
            f"Refusing to empty {mine}: it is a symlink to {mine.resolve()}, not the course's folder."
        )
    refuse_unless_mine(pafs.LocalFileSystem(), str(mine), str(mine), "empty")
    for entry in entries:
        check_deletable(entry, store)
    return [remove_path(entry, store, dry_run) for entry in entries]


def data_copy_note() -> str:
    """One line for lesson 06: the shared MNIST copy stays, and how to remove it when nobody needs it."""
    copy = offline_data_copy()
    if copy is None:
        return f"kept: the MNIST under {data_root()} (not written by the course: never removed by it)"
    return (
        f"kept: the MNIST copy in {copy} ({human_bytes(disk_usage(copy))}), shared by every learner whose "
        "COURSE_DATA points there; when nobody needs it any more: ./build.sh clean --data"
    )


# ---------------------------------------------------------------- actors


def is_yours(entry: dict[str, str]) -> bool:
    """Whether an entry of ``ray.util.list_named_actors(all_namespaces=True)`` is one of this learner's
    course actors: named ``config.ACTOR_PREFIX``..., in the namespace ``course-<learner>``. A teammate's
    actor of the same name and class on a shared cluster is in their namespace, so never yours."""
    return entry["namespace"] == learner_namespace() and entry["name"].startswith(ACTOR_PREFIX)


def course_actors() -> list[dict[str, str]]:
    """This learner's named course actors (``is_yours``), from Ray's actor registry, which needs no
    dashboard."""
    import ray

    return [a for a in ray.util.list_named_actors(all_namespaces=True) if is_yours(a)]


def kill_course_actors(timeout_s: float = 30.0) -> list[str]:
    """``ray.kill(actor, no_restart=True)`` every course actor of this learner; wait until Ray lists
    none. Returns ``namespace/name`` of each. Other learners' actors are never touched."""
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
    """This learner's course actors still alive: the state API's (by class, in the learner's
    namespace) when the dashboard runs, plus the named-actor registry's."""
    import ray

    alive: list[dict[str, Any]] = []
    try:
        context = ray.get_runtime_context()
        namespace, own_namespace, job = learner_namespace(), context.namespace, context.get_job_id()
        for a in alive_actors():
            # The learner's namespace; plus this driver's own actors in its own namespace (a
            # driver started without start_ray has an anonymous one).
            ours = a["namespace"] == namespace or (a["namespace"] == own_namespace and a["job_id"] == job)
            if ours and any(c in (a["class_name"] or "") for c in class_names):
                alive.append({"class_name": a["class_name"], "name": a["name"], "namespace": a["namespace"]})
    except Exception:  # no dashboard: the state API is unavailable
        pass
    named = {a.get("name") for a in alive}
    alive += [
        {"class_name": "?", "name": a["name"], "namespace": a["namespace"]}
        for a in course_actors()
        if a["name"] not in named
    ]
    return alive
