"""Run directories under the course storage (``COURSE_STORAGE``), through pyarrow filesystems.

pyarrow's filesystem layer is what Ray Train itself writes with, so one code path serves a
local folder, a shared mount and ``s3://`` alike.
"""

from __future__ import annotations

import pyarrow.fs as pafs

from course_utils.config import storage_root

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
