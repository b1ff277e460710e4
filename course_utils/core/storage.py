"""Run directories under the course storage (``COURSE_STORAGE``), through pyarrow filesystems.

pyarrow's filesystem layer is what Ray Train itself writes with, so one code path serves a
local folder, a shared mount and ``s3://`` alike. A learner's runs live in their own folder,
``<COURSE_STORAGE>/course-<learner>`` (``config.learner_storage_root``): learners sharing one
storage never see or delete each other's runs.

Ownership records: a workshop shares one ``COURSE_STORAGE``, which may even be a folder full of
other things (``.``, ``/tmp``), so the course deletes only folders that carry its record,
``OWNER_FILE``, naming the learner it wrote them for: the learner's folder
(``prepare_learner_storage``), a Parquet folder and the offline MNIST copy. The name starts with
a dot: ``read_parquet`` and pyarrow's dataset discovery skip it.

A shared folder: a folder on the driver's disk is not on other machines, and Ray Train fails only
once a worker there reports its first checkpoint. ``_check_storage_shared`` asks a zero-CPU task on
each other node whether it sees a probe file, so that fails fast, in one sentence.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path
from typing import Any

import pyarrow.fs as pafs

from course_utils.core.checkpoints import CheckpointError, load_state
from course_utils.core.config import (
    CourseConfigError,
    build_root,
    ensure_writable_dir,
    is_remote_uri,
    learner,
    learner_folder,
    learner_storage_root,
    s3_endpoint,
    storage_root,
)

OWNER_FILE = ".course-owner.json"
COURSE_ID = "ray-train-course"

# Remote folders this process already claimed (one storage round trip each, not one per call).
_claimed: set[tuple[str, str, str]] = set()


class CleanupRefused(PermissionError):
    """A deletion the course will not do: the path is not the course's. The message says why."""


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
        "learner": learner(),
        "kind": kind,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    fs.create_dir(path, recursive=True)
    with fs.open_output_stream(f"{path.rstrip('/')}/{OWNER_FILE}") as f:
        f.write((json.dumps(record, indent=1) + "\n").encode())
    return record


def claim_folder(fs: pafs.FileSystem, path: str, kind: str) -> None:
    """Write the ownership record of folder ``path`` unless it has one (once per process for remote
    storage). A record naming another learner is left as it is."""
    key = (fs.type_name, path.rstrip("/"), learner())
    if key in _claimed:
        return
    if read_owner(fs, path) is None:
        write_owner(fs, path, kind)
    if not isinstance(fs, pafs.LocalFileSystem):
        _claimed.add(key)


def _claim_local_folder(path: str | Path, kind: str) -> None:
    """``claim_folder`` for a local folder (a stat when the record is already there)."""
    path = str(path)
    if (Path(path) / OWNER_FILE).is_file():
        return
    claim_folder(pafs.LocalFileSystem(), path, kind)


def refuse_unless_mine(fs: pafs.FileSystem, path: str, shown: str, action: str) -> None:
    """Raise ``CleanupRefused`` unless folder ``path`` is this learner's (``shown`` names it in the message)."""
    record = read_owner(fs, path)
    if record is None:
        raise CleanupRefused(
            f"Refusing to {action} {shown}: it has no {OWNER_FILE}, so the course did not create it "
            "(someone else's folder, or your own files). Remove it yourself if you mean to, or use another path."
        )
    if record["learner"] != learner():
        raise CleanupRefused(
            f"Refusing to {action} {shown}: the course wrote it for learner {record['learner']!r}, and you are "
            f"{learner()!r} (COURSE_LEARNER). Each learner removes only their own."
        )


# (cluster address, folder) pairs found shared in this process: each is probed once.
_seen_everywhere: set[tuple[str, str]] = set()


def _exists(path: str) -> bool:
    return os.path.exists(path)


def _machines_without(folder: str | Path, timeout_s: float = 20.0) -> list[str]:
    """The addresses of the cluster's other nodes that do not see ``folder`` (a local path); [] when
    every node does, when Ray is not running, or when a node does not answer within ``timeout_s``
    (a busy node is not called blind)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    if not ray.is_initialized():
        return []
    here = ray.get_runtime_context().get_node_id()
    others = [n for n in ray.nodes() if n["Alive"] and n["NodeID"] != here]
    if not others:
        return []
    probe = Path(folder) / f".course-probe-{uuid.uuid4().hex[:12]}"
    probe.write_text("written by the driver: does every node see this folder?\n")
    try:
        exists = ray.remote(num_cpus=0, max_retries=0)(_exists)
        asked = {
            n["NodeManagerAddress"]: exists.options(
                scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)
            ).remote(str(probe))
            for n in others
        }
        ready, _ = ray.wait(list(asked.values()), num_returns=len(asked), timeout=timeout_s)
        return sorted({ip for ip, ref in asked.items() if ref in ready and not ray.get(ref)})
    finally:
        probe.unlink(missing_ok=True)


def _check_storage_shared(folder: str, setting: str = "COURSE_STORAGE") -> None:
    """Raise ``CourseConfigError`` in one sentence when ``folder`` (the local storage a fit will use) is
    not seen by every machine of the cluster; once per cluster and folder in a process."""
    import ray

    if not ray.is_initialized():
        return
    key = (ray.get_runtime_context().gcs_address, str(folder))
    if key in _seen_everywhere:
        return
    blind = _machines_without(folder)
    if blind:
        raise CourseConfigError(
            f"{setting}={os.environ.get(setting) or folder} is a folder on this machine only: the cluster's "
            f"machine(s) at {', '.join(blind)} do not see it, so their training workers could not write "
            f"checkpoints there; set {setting} to a shared mount that every machine sees at the same path, "
            "or to s3://bucket/prefix."
        )
    _seen_everywhere.add(key)


# Ray Train's record of which checkpoints of a run count (ray.train.v2 constants).
SNAPSHOT_FILE = "checkpoint_manager_snapshot.json"


class RunCorruptedError(RuntimeError):
    """A run directory Ray Train would resume from is damaged; the message says how to recover."""


# The run lesson 02 trains and later lessons (inference, cleanup) read.
LESSON02_RUN = "lesson02-resnet18"


def prepare_learner_storage() -> str:
    """Make this learner's storage folder ready to write; returns ``config.learner_storage_root()``.

    Local storage: ``COURSE_STORAGE`` is created and checked writable (a bad setting fails in the
    first cell, not later inside a worker), and the learner's folder created with its ownership
    record (a symlink there is refused). Remote storage gets its record at the first storage call
    (``learner_filesystem_and_root``). Safe to call again.
    """
    root = storage_root()
    mine = learner_storage_root()
    if is_remote_uri(root):
        return mine
    ensure_writable_dir(Path(root), "COURSE_STORAGE")
    path = Path(mine)
    if path.is_symlink():
        raise CourseConfigError(
            f"{path} is a symlink; the course keeps this learner's files in a real folder there. Remove the "
            "link, or set COURSE_STORAGE (or COURSE_LEARNER) to use another folder."
        )
    path.mkdir(exist_ok=True)
    _claim_local_folder(path, "learner folder")
    return mine


def local_output_path(name: str) -> Path:
    """Where ``local_output_dir(name)`` is, without creating anything: for reading what a lesson wrote.

    With remote storage it is this learner's folder under the build folder: learners sharing one
    checkout (a workshop machine) never write, or delete, each other's files."""
    root = learner_storage_root()
    return (Path(root) if not is_remote_uri(root) else build_root() / learner_folder()) / name


def local_output_dir(name: str) -> Path:
    """A local folder for a lesson's plain files (CSV, model.pt), created: inside this learner's
    folder of the course storage when that is a local path, else in this learner's folder under the
    build folder."""
    prepare_learner_storage()
    path = local_output_path(name)
    path.mkdir(parents=True, exist_ok=True)
    return path


def ray_storage() -> tuple[str, pafs.FileSystem | None]:
    """``(storage_path, storage_filesystem)`` for ``RunConfig``: every lesson's runs go through here.

    The path is this learner's folder, so run ``name`` lands in ``<COURSE_STORAGE>/course-<learner>/<name>``.
    A local folder or mount is ``(absolute path, None)``; ``s3://bucket/prefix`` is
    ``("bucket/prefix", S3FileSystem)`` built from ``COURSE_S3_ENDPOINT`` and the ``AWS_*`` variables::

        storage_path, storage_filesystem = ray_storage()
        RunConfig(name=..., storage_path=storage_path, storage_filesystem=storage_filesystem)
    """
    path, fs = _storage_for(storage_root())  # checks the shared URI (e.g. that it names a bucket)
    if fs is None:
        mine = prepare_learner_storage()  # created locally, with its ownership record
        _check_storage_shared(mine)  # on a cluster of several machines: does every one see it?
        return mine, None
    return f"{path.rstrip('/')}/{learner_folder()}", fs


def _storage_for(root: str) -> tuple[str, pafs.FileSystem | None]:
    """``(path, filesystem or None)`` of a local path or a storage URI."""
    if not is_remote_uri(root):
        return root, None
    if root.startswith("s3://"):
        return _s3(root)
    fs, path = pafs.FileSystem.from_uri(root)  # gs://, hdfs://...: pyarrow's own resolution
    return path, fs


def _s3(uri: str) -> tuple[str, pafs.S3FileSystem]:
    """Path inside the bucket and an ``S3FileSystem`` for ``s3://bucket/prefix``."""
    path = uri[len("s3://") :].strip("/")
    if not path:
        raise CourseConfigError(
            f"COURSE_STORAGE={uri!r} names no bucket; use s3://bucket or s3://bucket/prefix."
        )
    endpoint = s3_endpoint()
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    if not region:
        # AWS answers only in the bucket's own region; an S3-compatible store ignores it.
        region = "us-east-1" if endpoint else pafs.resolve_s3_region(path.split("/", 1)[0])
    # Credentials set on the driver travel with the filesystem to workers on other nodes (they
    # need not share the driver's environment); without them every node uses its own AWS chain.
    fs = pafs.S3FileSystem(
        access_key=os.environ.get("AWS_ACCESS_KEY_ID") or None,
        secret_key=os.environ.get("AWS_SECRET_ACCESS_KEY") or None,
        session_token=os.environ.get("AWS_SESSION_TOKEN") or None,
        region=region,
        scheme=endpoint.split("://", 1)[0] if endpoint else None,
        endpoint_override=endpoint.split("://", 1)[1] if endpoint else None,
        connect_timeout=10,
        request_timeout=60,
    )
    return path, fs


def filesystem_and_root() -> tuple[pafs.FileSystem, str]:
    """(pyarrow filesystem, path inside it) of ``COURSE_STORAGE`` itself, shared by every learner."""
    path, fs = _storage_for(storage_root())
    if fs is None:
        fs, path = pafs.FileSystem.from_uri(path)
    return fs, path


def learner_filesystem_and_root(claim: bool = True) -> tuple[pafs.FileSystem, str]:
    """(pyarrow filesystem, path inside it) of this learner's folder: what ``ray_storage`` gives Ray.
    With ``claim``, its ownership record is written if missing (once per process on remote storage)."""
    fs, root = filesystem_and_root()
    path = f"{root.rstrip('/')}/{learner_folder()}"
    if claim and isinstance(fs, pafs.LocalFileSystem):
        prepare_learner_storage()  # creates the folder with its record
    elif claim:
        claim_folder(fs, path, "learner folder")
    return fs, path


def result_from_run(name: str):
    """``ray.train.Result`` of run ``name`` read back from storage (any ``COURSE_STORAGE``, S3 included)."""
    import ray.train

    fs, root = learner_filesystem_and_root()
    return ray.train.Result.from_path(f"{root}/{run_path(name).rsplit('/', 1)[1]}", storage_filesystem=fs)


def run_path(name: str) -> str:
    """Where Ray Train keeps run ``name``: what ``RunConfig(name, storage_path)`` resolves to."""
    if not name or "/" in name or name in (".", ".."):
        raise ValueError(f"A run name is one folder name, got {name!r}.")
    return f"{learner_storage_root()}/{name}"


def run_exists(name: str) -> bool:
    """True when storage holds a directory for run ``name``. The first storage call of a fit: a store
    that is unreachable or misconfigured fails here, in plain words, not inside Ray Train's controller."""
    fs, shared = filesystem_and_root()
    try:
        bucket = shared.split("/", 1)[0]
        if isinstance(fs, pafs.S3FileSystem) and fs.get_file_info(bucket).type == pafs.FileType.NotFound:
            raise OSError(f"bucket {bucket!r} does not exist")  # Ray would fail later, less plainly
        fs, root = learner_filesystem_and_root()
        path = f"{root}/{run_path(name).rsplit('/', 1)[1]}"
        return fs.get_file_info(path).type == pafs.FileType.Directory
    except OSError as exc:
        if isinstance(fs, pafs.LocalFileSystem):
            raise
        raise CourseConfigError(
            f"Cannot read COURSE_STORAGE={storage_root()!r} ({type(exc).__name__}: {exc}). Check the bucket "
            "exists, COURSE_S3_ENDPOINT (for S3-compatible stores) and the AWS_ACCESS_KEY_ID / "
            "AWS_SECRET_ACCESS_KEY credentials."
        ) from exc


def reset_run(name: str) -> bool:
    """Delete run ``name`` so the next fit starts fresh (Ray Train resumes a run whose name already
    exists in storage); True when something was deleted."""
    if not run_exists(name):
        return False
    fs, root = learner_filesystem_and_root()
    fs.delete_dir(f"{root}/{name}")
    return True


def check_run(name: str) -> dict[str, Any] | None:
    """Preflight before resuming run ``name``: fail clearly instead of resuming from damage.

    None when there is nothing to resume, else ``{"checkpoints": [...], "latest": dir name,
    "latest_metrics": {...}}``. ``RunCorruptedError`` when the snapshot is unreadable, a checkpoint
    it lists is missing or does not load, or checkpoints exist without a snapshot (Ray Train would
    then silently start from scratch).
    """

    if not run_exists(name):
        return None
    fs, root = learner_filesystem_and_root()
    run_dir = f"{root}/{name}"
    hint = (
        f"Delete the run to start fresh (course_utils.core.storage.reset_run({name!r})) or train under "
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
    """The checkpoints Ray Train has registered for run ``name`` (dir name + metrics), oldest first;
    empty when none yet. Read from the run's snapshot, cheap enough to poll while a run trains."""
    fs, root = learner_filesystem_and_root(claim=False)  # polled: no writes
    path = f"{root}/{name}/{SNAPSHOT_FILE}"
    try:
        with fs.open_input_stream(path) as f:
            snapshot = json.loads(f.read().decode())
    except (FileNotFoundError, OSError, ValueError):  # not written yet, or mid-write
        return []
    return [
        {"name": r["checkpoint_dir_name"], "metrics": r["metrics"]} for r in snapshot["checkpoint_results"]
    ]
