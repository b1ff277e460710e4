"""Ownership records: how the course knows a folder is its own, and whose it is.

A workshop shares one ``COURSE_STORAGE`` (a mount or an ``s3://`` prefix) and one cluster among
many learners, and a ``COURSE_STORAGE`` may even be a folder full of other things (``.``, ``/tmp``).
So the course deletes only folders that carry its ownership record, ``OWNER_FILE``, naming the
learner (``config.learner()``) the course wrote it for. It writes one when it creates:

- the learner's storage folder ``<COURSE_STORAGE>/course-<learner>`` (``storage.prepare_learner_storage``);
- a Parquet folder (``raydata.write_parquet``);
- the offline MNIST copy (``data.ensure_mnist``).

Records go through pyarrow filesystems, so a local folder and ``s3://`` work alike. The file
name starts with a dot: Ray Data's ``read_parquet`` and pyarrow's dataset discovery skip it.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pyarrow.fs as pafs

OWNER_FILE = ".course-owner.json"
COURSE_ID = "ray-train-course"

# Remote folders this process already claimed (one storage round trip each, not one per call).
_claimed: set[tuple[str, str, str]] = set()


class CleanupRefused(PermissionError):
    """A deletion the course will not do: the path is not the course's. The message says why."""


def _learner() -> str:
    from course_utils.config import learner

    return learner()


def read_owner(fs: pafs.FileSystem, path: str) -> dict[str, Any] | None:
    """The course's ownership record of folder ``path``, or None when it has none (or a foreign one)."""
    record_path = f"{path.rstrip('/')}/{OWNER_FILE}"
    if fs.get_file_info(record_path).type != pafs.FileType.File:
        return None
    try:
        with fs.open_input_stream(record_path) as f:
            record = json.loads(f.read().decode())
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(record, dict) or record.get("course") != COURSE_ID or not record.get("learner"):
        return None
    return record


def write_owner(fs: pafs.FileSystem, path: str, kind: str) -> dict[str, Any]:
    """Create folder ``path`` (if needed) and record that the course made it for this learner."""
    record = {
        "course": COURSE_ID,
        "learner": _learner(),
        "kind": kind,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    fs.create_dir(path, recursive=True)
    with fs.open_output_stream(f"{path.rstrip('/')}/{OWNER_FILE}") as f:
        f.write((json.dumps(record, indent=1) + "\n").encode())
    return record


def is_mine(fs: pafs.FileSystem, path: str) -> bool:
    """True when folder ``path`` carries the course's record naming this learner."""
    record = read_owner(fs, path)
    return record is not None and record["learner"] == _learner()


def claim(fs: pafs.FileSystem, path: str, kind: str) -> None:
    """Write the ownership record of folder ``path`` unless it has one (once per process for remote
    storage). A record naming another learner is left as it is: that folder stays theirs."""
    key = (fs.type_name, path.rstrip("/"), _learner())
    if key in _claimed:
        return
    if read_owner(fs, path) is None:
        write_owner(fs, path, kind)
    if not isinstance(fs, pafs.LocalFileSystem):
        _claimed.add(key)


def claim_local(path: str | Path, kind: str) -> None:
    """``claim`` for a local folder (a stat when the record is already there)."""
    path = str(path)
    if (Path(path) / OWNER_FILE).is_file():
        return
    claim(pafs.LocalFileSystem(), path, kind)


def refuse_unless_mine(fs: pafs.FileSystem, path: str, shown: str, action: str) -> None:
    """Raise ``CleanupRefused`` unless folder ``path`` is this learner's (``shown`` names it in the message)."""
    record = read_owner(fs, path)
    if record is None:
        raise CleanupRefused(
            f"Refusing to {action} {shown}: it has no {OWNER_FILE}, so the course did not create it "
            "(someone else's folder, or your own files). Remove it yourself if you mean to, or use another path."
        )
    if record["learner"] != _learner():
        raise CleanupRefused(
            f"Refusing to {action} {shown}: the course wrote it for learner {record['learner']!r}, and you are "
            f"{_learner()!r} (COURSE_LEARNER). Each learner removes only their own."
        )
