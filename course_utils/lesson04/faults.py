"""Fire-once fault injection for the fault-tolerance lesson and its tests.

A fault is a plain dict (it travels in ``train_loop_config``) naming a marker file and its
pyarrow filesystem (``Markers``: the course storage, which every node sees). It fires only while
the marker does not exist and creates it just before firing: restarted workers, maybe on another
machine, remember nothing, but the file survives, so the fault fires once per marker.

A fault is also a callable, so a lesson's loop needs nothing of the course to use one: the driver passes it
in ``config["fault"]`` (``planted(a, b)`` for several) and the loop calls ``fault(rank=..., epoch=...,
step=...)`` before each step; without one the loop runs plain. (The mid-epoch loop still wraps its batches in
``inject(loader, spec, rank=..., epoch=...)``.) Three ways to fail:
``how="raise"``, ``how="kill"`` (the worker SIGKILLs itself) and ``how="external"`` (the worker
announces where it is; the driver's ``ExternalKiller`` SIGKILLs it on its own machine).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import pyarrow.fs as pafs

from course_utils.core.storage import Storage
from course_utils.internals.dashboard import alive_actors

HOWS = ("raise", "kill", "external")
# How long a worker at an "external" fault point waits for the ExternalKiller before going on.
EXTERNAL_HOLD_S = 60.0


class _Marker(NamedTuple):
    """One marker file: its path on ``filesystem`` (pyarrow's; it pickles, credentials and all)."""

    path: str
    filesystem: pafs.FileSystem


class Markers:
    """A folder of fault markers in this learner's course storage, which every node sees: a fault that
    fired on one machine stays fired when the rank restarts on another; ``markers / "name"``: a ``_Marker``."""

    def __init__(self, store: Storage, name: str):
        self.filesystem, root = store.learner_filesystem()
        self.path = f"{root.rstrip('/')}/{name}"

    def __truediv__(self, name: str) -> _Marker:
        return _Marker(f"{self.path}/{name}", self.filesystem)

    def clear(self) -> Markers:
        """Remove the markers an earlier run left (the folder is created if missing); returns self."""
        self.filesystem.create_dir(self.path, recursive=True)
        self.filesystem.delete_dir_contents(self.path, missing_dir_ok=True)
        return self


def _read(spec: dict[str, Any]) -> str | None:
    """The marker's text, or None while it does not exist."""
    fs = spec["filesystem"]
    if fs.get_file_info(spec["marker"]).type == pafs.FileType.NotFound:
        return None
    with fs.open_input_stream(spec["marker"]) as f:
        return f.read().decode()


def _write(spec: dict[str, Any], text: str) -> None:
    fs = spec["filesystem"]
    fs.create_dir(spec["marker"].rsplit("/", 1)[0], recursive=True)
    with fs.open_output_stream(spec["marker"]) as f:
        f.write(text.encode())


def settle_s() -> float:
    """How long a fault waits before firing (its ``delay_s``), so the last reported checkpoint counts.

    Ray Train registers a reported checkpoint when its controller next polls the workers, every
    ``RAY_TRAIN_HEALTH_CHECK_INTERVAL_S`` (2 s by default; the course's smoke profile sets 0.5 s):
    a crash sooner than that after ``report()`` can lose the checkpoint (measured: a kill 1.6 s after
    a report, with 2 s polls). Two polls: 1 s in the smoke profile, 4 s with Ray's default.
    """
    return 2 * float(os.environ.get("RAY_TRAIN_HEALTH_CHECK_INTERVAL_S") or 2.0)


class InjectedFault(RuntimeError):
    """The error an in-loop crash raises, so the output says plainly it was on purpose."""


class Fault(dict):
    """One fault spec (``crash_once``): a plain dict that travels in ``train_loop_config``, and a callable
    a loop calls before each step; ``fault(rank=..., epoch=..., step=...)`` fails there, once."""

    def __call__(self, *, rank: int, epoch: int, step: int, during: str = "step") -> None:
        maybe_fail(self, rank=rank, epoch=epoch, step=step, during=during)


class Faults(list):
    """Several faults as one callable for ``config["fault"]`` (``planted``): ``maybe_fail`` takes a list too."""

    __call__ = Fault.__call__


def planted(*specs: dict[str, Any]) -> Faults:
    """The faults ``specs`` as the one callable a loop's ``config["fault"]`` holds."""
    return Faults(specs)


def crash_once(
    marker: str | Path | _Marker,
    *,
    rank: int = 1,
    epoch: int = 1,
    step: int = 0,
    how: str = "raise",
    during: str = "step",
    delay_s: float = 0.0,
) -> Fault:
    """A fault spec: ``rank`` fails at ``step`` of ``epoch`` the first time it gets there.

    ``how="raise"`` raises ``InjectedFault``; ``how="kill"`` SIGKILLs the worker's own process (an
    OOM-killer style death); ``how="external"`` only writes the marker (with the worker's pid) for an
    ``ExternalKiller``. ``marker``: a ``_Marker`` (seen by every node) or a local path.
    ``during="checkpoint"`` fires while the rank writes the checkpoint after ``step``. ``delay_s``
    waits before failing, so the last reported checkpoint counts (see ``settle_s``).
    """
    if how not in HOWS:
        raise ValueError(f"how must be one of {', '.join(map(repr, HOWS))}, not {how!r}")
    if during not in ("step", "checkpoint"):
        raise ValueError(f"during must be 'step' or 'checkpoint', not {during!r}")
    if not isinstance(marker, _Marker):
        marker = _Marker(str(Path(marker).resolve()), pafs.LocalFileSystem())
    return Fault(
        marker=marker.path,
        filesystem=marker.filesystem,
        rank=rank,
        epoch=epoch,
        step=step,
        how=how,
        during=during,
        delay_s=float(delay_s),
    )


def fired(spec: dict[str, Any] | None) -> bool:
    """True once the fault described by ``spec`` has fired."""
    return bool(spec) and _read(spec) is not None


def maybe_fail(
    spec: dict[str, Any] | Sequence[dict[str, Any]] | None,
    *,
    rank: int,
    epoch: int,
    step: int,
    during: str = "step",
) -> None:
    """Called before every step (through ``inject``); fails once where ``spec`` (or each of a list) says."""
    if isinstance(spec, list | tuple):
        for one in spec:
            maybe_fail(one, rank=rank, epoch=epoch, step=step, during=during)
        return
    where = (spec["rank"], spec["epoch"], spec["step"], spec.get("during", "step")) if spec else None
    if (rank, epoch, step, during) != where or _read(spec) is not None:
        return
    if spec.get("delay_s"):
        time.sleep(spec["delay_s"])
    if spec["how"] == "external":
        _write(spec, f"{os.getpid()}\n")  # the ExternalKiller on the driver takes it from here
        print(
            f"[hold] rank {rank} (pid {os.getpid()}) at epoch {epoch}, step {step}: waits here until "
            "this process is killed or its worker group restarts",
            flush=True,
        )
        hold = spec.get("hold_s", EXTERNAL_HOLD_S)
        time.sleep(hold)  # hold still, so the kill lands exactly here (not a step later)
        print(
            f"[hold] rank {rank}: nobody killed pid {os.getpid()} within {hold:g} s; continuing", flush=True
        )
        return
    _write(spec, f"fired on rank {rank} at epoch {epoch} step {step} (pid {os.getpid()})\n")
    where = f"epoch {epoch}, step {step}" + (
        " while writing its checkpoint" if during == "checkpoint" else ""
    )
    print(f"[fault] rank {rank}: injected failure at {where} ({spec['how']})", flush=True)
    if spec["how"] == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    raise InjectedFault(f"injected failure on rank {rank} at epoch {epoch}, step {step}")


def inject(
    batches: Iterable[Any],
    spec: dict[str, Any] | Sequence[dict[str, Any]] | None,
    *,
    rank: int,
    epoch: int,
    first_step: int = 0,
) -> Iterator[Any]:
    """``batches`` unchanged, with ``maybe_fail`` called before each one trains (lesson 04's hook);
    steps are numbered from ``first_step`` (a resumed loop starts past 0). No ``spec``: a pass-through."""
    for step, batch in enumerate(batches, first_step):
        maybe_fail(spec, rank=rank, epoch=epoch, step=step)
        yield batch


def train_worker_pids() -> dict[int, tuple[str, str | None]]:
    """{pid: (actor_id, node_id)} of the alive Ray Train worker actors, from Ray's state API."""

    return {a["pid"]: (a["actor_id"], a["node_id"]) for a in alive_actors("RayTrainWorker") if a["pid"]}


def _process_title(pid: int) -> str:
    """The title Ray gives a worker process (``ray::RayTrainWorker``), read from /proc."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def _sigkill_train_worker(pid: int) -> None:
    """SIGKILL ``pid`` on this machine if it is a Ray Train worker (its process title says so); never
    another process: a pid names a process on one machine only."""
    title = _process_title(pid)
    if not title.startswith("ray::RayTrainWorker"):
        raise RuntimeError(f"pid {pid} is not a Ray Train worker process on this machine (title {title!r}).")
    os.kill(pid, signal.SIGKILL)


def _kill_on_its_node(pid: int, node_id: str | None) -> str:
    """SIGKILL Ray Train worker ``pid`` on its own node: from here on the driver's node (or an unknown
    one), else from a zero-CPU task pinned to that node. Says where the kill was sent from."""
    import ray

    here = ray.get_runtime_context().get_node_id() if ray.is_initialized() else None
    if node_id is None or node_id == here:
        _sigkill_train_worker(pid)
        return "the driver's node"
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    task = ray.remote(num_cpus=0, max_retries=0)(_sigkill_train_worker)
    pinned = NodeAffinitySchedulingStrategy(node_id, soft=False)
    ray.get(task.options(scheduling_strategy=pinned).remote(pid), timeout=120)
    return f"a task on its node ({node_id[:8]})"


class ExternalKiller:
    """Kill a Ray Train worker from outside, the way a lost machine or the OOM killer would.

    A driver thread waits for the marker of a ``how="external"`` spec (written by the worker at the
    chosen step), checks with Ray's state API that its pid is an alive ``RayTrainWorker``, and has it
    SIGKILLed on its own node (``_kill_on_its_node``). Fires once.
    """

    def __init__(self, spec: dict[str, Any], timeout_s: float = 600.0, poll_s: float = 0.1):
        if spec.get("how") != "external":
            raise ValueError("ExternalKiller needs a fault spec made with crash_once(..., how='external').")
        self.spec, self.timeout_s, self.poll_s = spec, timeout_s, poll_s
        self.pid: int | None = None
        self.actor_id: str | None = None
        self.killed_at: float | None = None  # time.time() of the SIGKILL
        self.found_with: str | None = None  # how the pid was confirmed to be a Ray Train worker
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="external-killer", daemon=True)

    def start(self) -> ExternalKiller:
        """Start watching; returns self so ``killer = ExternalKiller(spec).start()`` reads well."""
        self._thread.start()
        return self

    def _run(self) -> None:
        deadline = time.monotonic() + self.timeout_s
        try:
            while not (said := (_read(self.spec) or "").strip()):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"No worker reached the kill point within {self.timeout_s:.0f} s.")
                time.sleep(self.poll_s)
            pid = int(said.split()[0])
            try:
                workers = train_worker_pids()  # Ray's state API: which pids are Ray Train workers, where
                self.found_with = "Ray's state API"
            except Exception as exc:  # the dashboard (which serves the state API) may be down
                print(
                    f"[driver] state API unavailable ({type(exc).__name__}); checking the process title",
                    flush=True,
                )
                title = _process_title(pid)
                workers = {pid: ("unknown", None)} if title.startswith("ray::RayTrainWorker") else {}
                self.found_with = f"the process title {title!r}"
            if pid not in workers:
                raise RuntimeError(f"pid {pid} is not an alive RayTrainWorker (alive: {sorted(workers)}).")
            actor_id, node_id = workers[pid]
            sent_from = _kill_on_its_node(pid, node_id)
            self.pid, self.actor_id, self.killed_at = pid, actor_id, time.time()
            print(
                f"[driver] SIGKILL sent to RayTrainWorker pid {pid} (actor {actor_id[:12]}, found with "
                f"{self.found_with}) of rank {self.spec['rank']}, from {sent_from}",
                flush=True,
            )
        except BaseException as exc:  # reported through .error / join(); a thread must not die silently
            self.error = exc
            print(f"[driver] external kill failed: {exc}", flush=True)

    def join(self, timeout: float | None = None) -> ExternalKiller:
        """Wait for the thread; raise what went wrong in it, if anything."""
        self._thread.join(timeout)
        if self.error is not None:
            raise RuntimeError(f"External kill did not happen: {self.error}") from self.error
        return self

    @property
    def fired(self) -> bool:
        """True once the SIGKILL was sent."""
        return self.killed_at is not None


def train_loop_skipping_report(config: dict[str, Any]) -> None:
    """A buggy loop for the troubleshooting demo: rank ``skip_rank`` skips the last report.

    ``ray.train.report`` is a barrier, so the other ranks wait there for ever (a warning every
    ``RAY_TRAIN_COLLECTIVE_WARN_INTERVAL_S``) unless ``RAY_TRAIN_COLLECTIVE_TIMEOUT_S`` is set.
    """
    import ray.train

    rank = ray.train.get_context().get_world_rank()
    reports, skip_rank = int(config.get("reports", 2)), int(config.get("skip_rank", 1))
    for i in range(reports):
        if rank == skip_rank and i == reports - 1:
            print(
                f"[rank {rank}] skipping report {i} (the bug: e.g. an `if rank == 0:` around report)",
                flush=True,
            )
            return
        ray.train.report({"report": i, "rank": rank})
        print(f"[rank {rank}] report {i} done", flush=True)
