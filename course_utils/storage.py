"""Run directories under the course storage (``COURSE_STORAGE``), through pyarrow filesystems.

pyarrow's filesystem layer is what Ray Train itself writes with, so one code path serves a
local folder, a shared mount and ``s3://`` alike.
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow.fs as pafs

from course_utils.config import storage_root

# Ray Train's record of which checkpoints of a run count (ray.train.v2 constants).
SNAPSHOT_FILE = "checkpoint_manager_snapshot.json"


class RunCorruptedError(RuntimeError):
    """A run directory Ray Train would resume from is damaged; the message says how to recover."""


# The run lesson 02 trains and later lessons (inference, cleanup) read.
LESSON02_RUN = "lesson02-resnet18"


def filesystem_and_root() -> tuple[pafs.FileSystem, str]:
    """(pyarrow filesystem, path inside it) of the course storage root."""
    fs, path = pafs.FileSystem.from_uri(storage_root())
    return fs, path


def run_path(name: str) -> str:
    """Where Ray Train keeps run ``name``: what ``RunConfig(name, storage_path)`` resolves to."""
    if not name or "/" in name or name in (".", ".."):
        raise ValueError(f"A run name is one folder name, got {name!r}.")
    return f"{storage_root()}/{name}"


def run_exists(name: str) -> bool:
    """True when storage holds a directory for run ``name``."""
    fs, root = filesystem_and_root()
    return fs.get_file_info(f"{root}/{run_path(name).rsplit('/', 1)[1]}").type == pafs.FileType.Directory


def reset_run(name: str) -> bool:
    """Delete run ``name`` so the next fit starts fresh; True when something was deleted.

    Ray Train resumes a run whose name already exists in storage. A lesson that wants a
    fresh run (re-running a notebook) calls this first.
    """
    if not run_exists(name):
        return False
    fs, root = filesystem_and_root()
    fs.delete_dir(f"{root}/{name}")
    return True


def check_run(name: str) -> dict[str, Any] | None:
    """Preflight before resuming run ``name``: fail clearly instead of resuming from damage.

    Returns None when there is nothing to resume (no directory, or one without checkpoints),
    else ``{"checkpoints": [...], "latest": dir name, "latest_metrics": {...}}``. Raises
    ``RunCorruptedError`` when the snapshot is unreadable, a checkpoint it lists is missing or
    does not load, or checkpoints exist without a snapshot (Ray Train would then silently
    start from scratch).
    """
    from course_utils.checkpoints import CheckpointError, load_state

    if not run_exists(name):
        return None
    fs, root = filesystem_and_root()
    run_dir = f"{root}/{name}"
    hint = (
        f"Delete the run to start fresh (course_utils.storage.reset_run({name!r})) or train under "
        "another RunConfig(name=...)."
    )
    entries = fs.get_file_info(pafs.FileSelector(run_dir))
    checkpoint_dirs = sorted(
        e.base_name
        for e in entries
        if e.type == pafs.FileType.Directory and e.base_name.startswith("checkpoint_")
    )
    snapshot_path = f"{run_dir}/{SNAPSHOT_FILE}"
    if fs.get_file_info(snapshot_path).type != pafs.FileType.File:
        if checkpoint_dirs:
            raise RunCorruptedError(
                f"Run {name!r} has {len(checkpoint_dirs)} checkpoint folder(s) but no {SNAPSHOT_FILE}: "
                f"Ray Train would ignore them and silently train from scratch. {hint}"
            )
        return None
    try:
        with fs.open_input_stream(snapshot_path) as f:
            snapshot = json.loads(f.read().decode())
        results = snapshot["checkpoint_results"]
        names = [r["checkpoint_dir_name"] for r in results]
        latest = (snapshot.get("latest_checkpoint_result") or {}).get("checkpoint_dir_name")
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as exc:
        raise RunCorruptedError(
            f"Run {name!r}: {SNAPSHOT_FILE} is unreadable ({type(exc).__name__}: {exc}); it is "
            f"truncated or was edited. {hint}"
        ) from exc
    for checkpoint_name in dict.fromkeys([*names, *([latest] if latest else [])]):
        path = f"{run_dir}/{checkpoint_name}"
        if fs.get_file_info(path).type != pafs.FileType.Directory:
            raise RunCorruptedError(
                f"Run {name!r}: {SNAPSHOT_FILE} lists {checkpoint_name}, which is missing from storage. {hint}"
            )
        try:
            _load_from_storage(fs, path, load_state)
        except CheckpointError as exc:
            raise RunCorruptedError(f"Run {name!r}: {checkpoint_name} does not load: {exc} {hint}") from exc
    latest_metrics = next((r["metrics"] for r in results if r["checkpoint_dir_name"] == latest), None)
    return {"checkpoints": names, "latest": latest, "latest_metrics": latest_metrics}


def _load_from_storage(fs: pafs.FileSystem, path: str, load_state) -> dict[str, Any]:
    """Load a course checkpoint directly (local) or through a download (remote storage)."""
    if isinstance(fs, pafs.LocalFileSystem):
        return load_state(path)
    from ray.train import Checkpoint

    return load_state(Checkpoint(path=path, filesystem=fs))


def reported_checkpoints(name: str) -> list[dict[str, Any]]:
    """The checkpoints Ray Train has registered for run ``name`` (dir name + metrics), oldest first.

    Read from the run's snapshot without loading anything: cheap enough to poll while a run
    trains (the elastic demo waits for the first checkpoint this way). Empty when none yet.
    """
    fs, root = filesystem_and_root()
    path = f"{root}/{name}/{SNAPSHOT_FILE}"
    try:
        with fs.open_input_stream(path) as f:
            snapshot = json.loads(f.read().decode())
    except (FileNotFoundError, OSError, ValueError):  # not written yet, or mid-write
        return []
    return [
        {"name": r["checkpoint_dir_name"], "metrics": r["metrics"]} for r in snapshot["checkpoint_results"]
    ]
