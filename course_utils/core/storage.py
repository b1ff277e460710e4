"""Run directories under the course storage (``COURSE_STORAGE``), through pyarrow filesystems.

pyarrow's filesystem layer is what Ray Train itself writes with, so one code path serves a
local folder, a shared mount and ``s3://`` alike. ``resolve()`` reads the settings once into a
``Storage`` value (``start_ray`` returns it as ``ray_session.storage``), and everything that reads
or writes runs is handed that value. A learner's runs live in their own folder,
``<COURSE_STORAGE>/course-<learner>`` (``Storage.mine``): learners sharing one storage never see or
delete each other's runs.

Ownership records: a workshop shares one ``COURSE_STORAGE``, which may even be a folder full of
other things (``.``, ``/tmp``), so the course deletes only folders that carry its record,
``OWNER_FILE``, naming the learner it wrote them for: the learner's folder
(``Storage.prepare``), a Parquet folder and the offline MNIST copy. The name starts with
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
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import pyarrow.fs as pafs

from course_utils.core.checkpoints import CheckpointError, load_state
from course_utils.core.config import (
    COURSE_PREFIX,
    CourseConfigError,
    build_root,
    ensure_writable_dir,
    is_remote_uri,
    learner,
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


@dataclass(frozen=True)
class Storage:
    """Where this learner's runs go: ``COURSE_STORAGE`` resolved once (``resolve()``, which
    ``start_ray`` calls and returns as ``ray_session.storage``) and passed to whatever reads or
    writes runs, so a reader follows one value from the lesson that sets it.

    ``root`` is ``COURSE_STORAGE`` itself (an absolute local path or a URI, shared by every learner);
    ``filesystem`` and ``root_path`` are pyarrow's view of it (built once, at first use); this learner's runs live in
    ``<root>/course-<learner>`` (``mine``).
    """

    root: str
    learner: str

    @cached_property
    def _located(self) -> tuple[pafs.FileSystem, str]:
        # Built at first use: for AWS S3 without AWS_REGION it asks AWS for the bucket's region, which
        # a lesson that only writes local files never needs.
        path, fs = _storage_for(self.root)
        if fs is None:
            fs, path = pafs.FileSystem.from_uri(path)
        return fs, path

    @property
    def filesystem(self) -> pafs.FileSystem:
        """pyarrow's filesystem of ``root`` (local, S3 with ``COURSE_S3_ENDPOINT``, ...)."""
        return self._located[0]

    @property
    def root_path(self) -> str:
        """``root``'s path inside ``filesystem`` (``bucket/prefix`` for S3)."""
        return self._located[1]

    @property
    def remote(self) -> bool:
        """True for ``scheme://`` storage (S3), False for a local folder or mount."""
        return is_remote_uri(self.root)

    @property
    def folder(self) -> str:
        """``course-<learner>``: this learner's folder inside the storage."""
        return f"{COURSE_PREFIX}{self.learner}"

    @property
    def mine(self) -> str:
        """This learner's folder as a person reads it: ``<COURSE_STORAGE>/course-<learner>``."""
        return f"{self.root}/{self.folder}" if self.remote else str(Path(self.root) / self.folder)

    @property
    def mine_path(self) -> str:
        """This learner's folder inside ``filesystem``."""
        return f"{self.root_path.rstrip('/')}/{self.folder}"

    def prepare(self) -> str:
        """Make this learner's folder ready to write; returns ``mine``.

        Local storage: ``COURSE_STORAGE`` is created and checked writable (a bad setting fails in the
        first cell, not later inside a worker), and the learner's folder created with its ownership
        record (a symlink there is refused). Remote storage gets its record at the first storage call
        (``learner_filesystem``). Safe to call again.
        """
        if self.remote:
            return self.mine
        ensure_writable_dir(Path(self.root), "COURSE_STORAGE")
        path = Path(self.mine)
        if path.is_symlink():
            raise CourseConfigError(
                f"{path} is a symlink; the course keeps this learner's files in a real folder there. Remove "
                "the link, or set COURSE_STORAGE (or COURSE_LEARNER) to use another folder."
            )
        path.mkdir(exist_ok=True)
        _claim_local_folder(path, "learner folder")
        return self.mine

    def local_output_path(self, name: str) -> Path:
        """Where ``local_output_dir(name)`` is, without creating anything: for reading what a lesson wrote.

        With remote storage it is this learner's folder under the build folder: learners sharing one
        checkout (a workshop machine) never write, or delete, each other's files."""
        return (build_root() / self.folder if self.remote else Path(self.mine)) / name

    def local_output_dir(self, name: str) -> Path:
        """A local folder for a lesson's plain files (CSV, model.pt), created: inside this learner's
        folder of the course storage when that is a local path, else in this learner's folder under
        the build folder."""
        self.prepare()
        path = self.local_output_path(name)
        path.mkdir(parents=True, exist_ok=True)
        return path

    def for_ray(self) -> tuple[str, pafs.FileSystem | None]:
        """``(storage_path, storage_filesystem)`` for ``RunConfig``: every lesson's runs go through here.

        Run ``name`` lands in ``<COURSE_STORAGE>/course-<learner>/<name>``. A local folder or mount is
        ``(absolute path, None)``; ``s3://bucket/prefix`` is ``("bucket/prefix/course-<learner>",
        S3FileSystem)`` built from ``COURSE_S3_ENDPOINT`` and the ``AWS_*`` variables::

            storage_path, storage_filesystem = ray_session.storage.for_ray()
            RunConfig(name=..., storage_path=storage_path, storage_filesystem=storage_filesystem)
        """
        if not self.remote:
            mine = self.prepare()  # created locally, with its ownership record
            _check_storage_shared(mine)  # on a cluster of several machines: does every one see it?
            return mine, None
        return self.mine_path, self.filesystem

    def locate(self, path: str | Path) -> tuple[pafs.FileSystem, str]:
        """``(filesystem, path inside it)`` of any path a lesson reads, for ``read_parquet(path, filesystem=fs)``.
        A path under ``s3://`` storage goes through ``filesystem``, so ``COURSE_S3_ENDPOINT`` applies (a bare
        ``read_parquet("s3://...")`` would ask AWS instead); a local path is made absolute."""
        path = str(path)
        if "://" not in path:
            return pafs.LocalFileSystem(), str(Path(path).resolve())
        if path == self.root or path.startswith(self.root + "/"):
            return self.filesystem, self.root_path.rstrip("/") + path[len(self.root) :]
        return pafs.FileSystem.from_uri(path)

    def learner_filesystem(self, claim: bool = True) -> tuple[pafs.FileSystem, str]:
        """(pyarrow filesystem, path inside it) of this learner's folder: what ``for_ray`` gives Ray.
        With ``claim``, its ownership record is written if missing (once per process on remote storage)."""
        if claim and not self.remote:
            self.prepare()  # creates the folder with its record
        elif claim:
            claim_folder(self.filesystem, self.mine_path, "learner folder")
        return self.filesystem, self.mine_path

    def run_path(self, name: str) -> str:
        """Where Ray Train keeps run ``name``: what ``RunConfig(name, storage_path)`` resolves to."""
        if not name or "/" in name or name in (".", ".."):
            raise ValueError(f"A run name is one folder name, got {name!r}.")
        return f"{self.mine}/{name}"

    def result(self, name: str):
        """``ray.train.Result`` of run ``name`` read back from storage (any ``COURSE_STORAGE``, S3 included)."""
        self.run_path(name)  # checks the name
        fs, root = self.learner_filesystem()
        import ray.train

        return ray.train.Result.from_path(f"{root}/{name}", storage_filesystem=fs)

    def run_exists(self, name: str) -> bool:
        """True when storage holds a directory for run ``name``. The first storage call of a fit: a store
        that is unreachable or misconfigured fails here, in plain words, not inside Ray Train's controller."""
        self.run_path(name)  # checks the name
        fs = self.filesystem
        try:
            bucket = self.root_path.split("/", 1)[0]
            if isinstance(fs, pafs.S3FileSystem) and fs.get_file_info(bucket).type == pafs.FileType.NotFound:
                raise OSError(f"bucket {bucket!r} does not exist")  # Ray would fail later, less plainly
            fs, root = self.learner_filesystem()
            return fs.get_file_info(f"{root}/{name}").type == pafs.FileType.Directory
        except OSError as exc:
            if not self.remote:
                raise
            raise CourseConfigError(
                f"Cannot read COURSE_STORAGE={self.root!r} ({type(exc).__name__}: {exc}). Check the bucket "
                "exists, COURSE_S3_ENDPOINT (for S3-compatible stores) and the AWS_ACCESS_KEY_ID / "
                "AWS_SECRET_ACCESS_KEY credentials."
            ) from exc

    def reset_run(self, name: str) -> bool:
        """Delete run ``name`` so the next fit starts fresh (Ray Train resumes a run whose name already
        exists in storage); True when something was deleted."""
        if not self.run_exists(name):
            return False
        fs, root = self.learner_filesystem()
        fs.delete_dir(f"{root}/{name}")
        return True

    def check_run(self, name: str) -> dict[str, Any] | None:
        """Preflight before resuming run ``name``: fail clearly instead of resuming from damage.

        None when there is nothing to resume, else ``{"checkpoints": [...], "latest": dir name,
        "latest_metrics": {...}}``. ``RunCorruptedError`` when the snapshot is unreadable, a checkpoint
        it lists is missing or does not load, or checkpoints exist without a snapshot (Ray Train would
        then silently start from scratch).
        """
        if not self.run_exists(name):
            return None
        fs, root = self.learner_filesystem()
        run_dir = f"{root}/{name}"
        hint = (
            f"Delete the run to start fresh (ray_session.storage.reset_run({name!r})) or train under "
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
                raise RunCorruptedError(
                    f"Run {name!r}: {checkpoint_name} does not load: {exc} {hint}"
                ) from exc
        latest_metrics = next((r["metrics"] for r in results if r["checkpoint_dir_name"] == latest), None)
        return {"checkpoints": names, "latest": latest, "latest_metrics": latest_metrics}

    def reported_checkpoints(self, name: str) -> list[dict[str, Any]]:
        """The checkpoints Ray Train has registered for run ``name`` (dir name + metrics), oldest first;
        empty when none yet. Read from the run's snapshot, cheap enough to poll while a run trains."""
        fs, root = self.learner_filesystem(claim=False)  # polled: no writes
        try:
            with fs.open_input_stream(f"{root}/{name}/{SNAPSHOT_FILE}") as f:
                snapshot = json.loads(f.read().decode())
        except (FileNotFoundError, OSError, ValueError):  # not written yet, or mid-write
            return []
        return [
            {"name": r["checkpoint_dir_name"], "metrics": r["metrics"]}
            for r in snapshot["checkpoint_results"]
        ]


def resolve() -> Storage:
    """``COURSE_STORAGE`` (and ``COURSE_LEARNER``, ``COURSE_S3_ENDPOINT``, the ``AWS_*`` variables) read
    into one ``Storage``: the one place the course works out where runs go. A URI that cannot work
    (``s3://`` with no bucket) fails here, in one sentence."""
    root = storage_root()
    if root.startswith("s3://"):
        _s3_path(root)  # fails now when it names no bucket
    return Storage(root=root, learner=learner())


def _storage_for(root: str) -> tuple[str, pafs.FileSystem | None]:
    """``(path, filesystem or None)`` of a local path or a storage URI."""
    if not is_remote_uri(root):
        return root, None
    if root.startswith("s3://"):
        return _s3(root)
    fs, path = pafs.FileSystem.from_uri(root)  # gs://, hdfs://...: pyarrow's own resolution
    return path, fs


def _s3_path(uri: str) -> str:
    """``bucket/prefix`` of ``s3://bucket/prefix``; a ``CourseConfigError`` when it names no bucket."""
    path = uri[len("s3://") :].strip("/")
    if not path:
        raise CourseConfigError(
            f"COURSE_STORAGE={uri!r} names no bucket; use s3://bucket or s3://bucket/prefix."
        )
    return path


def _s3(uri: str) -> tuple[str, pafs.S3FileSystem]:
    """Path inside the bucket and an ``S3FileSystem`` for ``s3://bucket/prefix``."""
    path = _s3_path(uri)
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


def _load_from_storage(fs: pafs.FileSystem, path: str, load_state) -> dict[str, Any]:
    """Load a course checkpoint directly (local) or through a download (remote storage)."""
    if isinstance(fs, pafs.LocalFileSystem):
        return load_state(path)
    from ray.train import Checkpoint

    return load_state(Checkpoint(path=path, filesystem=fs))
