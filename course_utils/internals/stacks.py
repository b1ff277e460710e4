"""The live Python stacks of a run's workers, cut down to the frames of the learner's code.

A hang shows no error: to see where each rank is, dump its stack. The workers (rank, pid, node)
come from Ray Train's run state (``course_utils.internals.runstate``), else the state API's
``RayTrainWorker`` actors. py-spy reads each stack, here or in a zero-CPU task pinned to the
worker's node: no dashboard route is needed, so a cluster started with Ray's defaults (whose
``/worker/traceback`` answers 403 unless the head opted into profiling) gives stacks too. A stack
py-spy cannot read says why in one sentence; the others are still shown.

``learner_frames`` keeps the frames between Ray's call into the training function and the
first library frame below it: where *your* code is, and the line it is waiting on.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import linecache
import os
import shutil
import subprocess
import sys
import sysconfig
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from course_utils.internals import dashboard, rayinternals, runstate

WORKER_CLASS = "RayTrainWorker"  # the class `ray list actors` shows for a Train worker
SYNC_ACTOR_CLASS = rayinternals.TRAIN_SYNC_ACTOR_CLASS
# Ray Train's own warning while a rank is missing from a report barrier.
BARRIER_WARNING = rayinternals.TRAIN_BARRIER_WARNING


class StackUnavailable(RuntimeError):
    """A worker's stack could not be dumped (py-spy missing or not permitted on its node, the node gone)."""


@dataclass(frozen=True)
class Frame:
    """One Python frame: function, file (full path when known) and line, innermost first in a thread."""

    function: str
    file: str
    line: int
    short_file: str = ""

    @property
    def where(self) -> str:
        return f"{self.short_file or self.file}:{self.line}"

    def source(self) -> str:
        """The frame's source line, when the file is readable from here ('' otherwise)."""
        return linecache.getline(self.file, self.line).strip() if self.file.startswith("/") else ""


@dataclass
class WorkerStack:
    """One worker process's threads, as py-spy saw them at ``taken_at``."""

    pid: int
    threads: dict[str, list[Frame]]
    rank: int | None = None
    node_id: str | None = None
    actor_id: str | None = None
    source: str = "py-spy"
    taken_at: float = field(default_factory=time.time)
    role: str = "rank"  # how ``rank`` is named in describe(): a Train rank, or e.g. a split's reader
    unavailable: str | None = None  # why py-spy could not read it (then ``threads`` is empty)

    def learner_frames(self, functions: Iterable[str] = ()) -> list[Frame]:
        """The learner's frames (outermost first) in the thread that runs the learner's code."""
        for frames in self.threads.values():
            mine = learner_frames(frames, functions)
            if mine:
                return mine
        return []

    def waiting_in(self, functions: Iterable[str] = ()) -> Frame | None:
        """The innermost frame of the thread running the learner's code: what it is blocked in."""
        for frames in self.threads.values():
            if learner_frames(frames, functions):
                return frames[0]
        return None

    def describe(self, functions: Iterable[str] = ()) -> str:
        """A few lines: which rank, where in the learner's code, and what it is blocked in."""
        who = f"{self.role} {self.rank}" if self.rank is not None else "worker"
        head = f"{who} (pid {self.pid}, {self.source})"
        if self.unavailable is not None:
            return f"{head}: its stack could not be read ({self.unavailable}); the lesson goes on without it"
        mine = self.learner_frames(functions)
        if not mine:
            return f"{head}: not in your code (it returned from it, or never started it)"
        lines = [f"{head}:"]
        for frame in mine:
            code = frame.source()
            lines.append(f"  {frame.function} ({frame.where})" + (f"    {code}" if code else ""))
        inner = self.waiting_in(functions)
        if inner is not None:
            lines.append(f"    ... blocked in {inner.function} ({inner.where})")
        return "\n".join(lines)


# Libraries whose frames py-spy may name by a short path ("ray/_private/worker.py") when it cannot
# tell the full one; what they are is decided by where the import system finds them here.
LIBRARY_PACKAGES = ("ray", "torch", "numpy", "pandas", "pyarrow", "tqdm", "torchvision", "torchdata")


def _course_root() -> Path:
    """The folder of the course's own package: its frames are never a library's."""
    return Path(__file__).resolve().parents[1]


@functools.lru_cache(maxsize=1)
def _library_roots() -> tuple[str, ...]:
    """Folders holding Python's own modules and installed packages, taken from where they really are:
    the stdlib and site folders, each installed distribution's folder (a ``--target`` folder on
    ``PYTHONPATH``, Debian's ``dist-packages``, a conda env) and where each of ``LIBRARY_PACKAGES`` is
    found (even without metadata); never one holding the course's package. Worked out once."""
    import importlib.metadata

    found = {sysconfig.get_paths()[key] for key in ("stdlib", "platstdlib", "purelib", "platlib")}
    for dist in importlib.metadata.distributions():
        try:
            found.add(str(dist.locate_file("")))
        except Exception:  # a broken distribution record: not a reason to misread a stack
            continue
    for name in LIBRARY_PACKAGES:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            continue
        for location in (spec.submodule_search_locations or []) if spec else []:
            found.add(str(Path(location).parent))
    course = _course_root()
    roots = set()
    for root in filter(None, found):
        for variant in (Path(root), Path(root).resolve()):
            if variant != Path(variant.anchor) and not course.is_relative_to(variant):
                roots.add(str(variant).rstrip("/") + "/")
    return tuple(sorted(roots))


def _importable_library(top: str) -> bool:
    """True when the import system finds top-level module ``top`` in a library folder here."""
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return False
    if spec is None:
        return False
    if spec.origin in ("built-in", "frozen"):
        return True
    where = spec.origin or next(iter(spec.submodule_search_locations or []), None)
    return where is not None and is_library(str(where))


def is_library(file: str) -> bool:
    """True for Python's own and installed packages' files (full paths or py-spy's short ones).

    Decided by where the modules really are (``_library_roots``). A full path in no such folder is a
    library's only inside a ``site-packages``/``dist-packages`` folder (another node's install).
    """
    if file.startswith("<"):  # <frozen ...>, <string>
        return True
    if file.startswith("/"):
        course = _course_root()
        real = os.path.realpath(file)
        if Path(file).is_relative_to(course) or Path(real).is_relative_to(course):
            return False
        if file.startswith(_library_roots()) or real.startswith(_library_roots()):
            return True
        return "/site-packages/" in file or "/dist-packages/" in file
    top = file.split("/")[0].removesuffix(".py")  # py-spy's short name: the package part
    return top in sys.stdlib_module_names or _importable_library(top)


def learner_frames(frames: list[Frame], functions: Iterable[str] = ()) -> list[Frame]:
    """The frames of the learner's code in one thread (innermost-first ``frames``), outermost first:
    from the frame Ray Train's wrapper called (``TRAIN_FN_ENTRY``), or the outermost of ``functions``
    (names, e.g. an actor method), inwards to the first library frame."""
    names = set(functions)
    outer_first = list(reversed(frames))
    start = None
    for i, frame in enumerate(outer_first):
        if frame.function == rayinternals.TRAIN_FN_ENTRY and i + 1 < len(outer_first):
            start = i + 1
            break
        if frame.function.split(".")[-1] in names or frame.function in names:
            start = i
            break
    if start is None:
        return []
    mine = []
    for frame in outer_first[start:]:
        if mine and is_library(frame.file):
            break
        mine.append(frame)
    return mine


def parse_py_spy_json(dump: str | list[dict[str, Any]]) -> dict[str, list[Frame]]:
    """``py-spy dump --json`` output -> {thread name: frames, innermost first}."""
    threads = json.loads(dump) if isinstance(dump, str) else dump
    out: dict[str, list[Frame]] = {}
    for thread in threads:
        name = thread.get("thread_name") or str(thread.get("os_thread_id") or thread["thread_id"])
        out[name] = [
            Frame(f["name"], f["filename"], int(f["line"]), f.get("short_filename") or "")
            for f in thread["frames"]
        ]
    return out


def py_spy() -> str | None:
    """The py-spy executable: next to this Python (the venv), else on PATH."""
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.exists() else shutil.which("py-spy")


def _py_spy_json(pid: int, timeout_s: float = 20.0) -> str:
    """``py-spy dump --json`` of a process on the machine this runs on (the driver's, or a worker
    node's inside a pinned task); ``StackUnavailable`` saying why, in one sentence, when it fails."""
    exe = py_spy()
    if exe is None:
        raise StackUnavailable("py-spy is not installed (pip install py-spy): it is what reads a live stack")
    done = subprocess.run(
        [exe, "dump", "--pid", str(pid), "--json"], capture_output=True, text=True, timeout=timeout_s
    )
    if done.returncode != 0:
        said = " ".join(line.strip() for line in (done.stderr or done.stdout).splitlines() if line.strip())
        raise StackUnavailable(f"py-spy dump --pid {pid} failed: {said[:300]}")
    return done.stdout


def dump_local(pid: int, timeout_s: float = 20.0) -> dict[str, list[Frame]]:
    """py-spy's dump of a process on this machine, as threads of frames."""
    return parse_py_spy_json(_py_spy_json(pid, timeout_s))


def dump_on_its_node(pid: int, node_id: str, timeout_s: float = 60.0) -> dict[str, list[Frame]]:
    """py-spy's dump of a worker on another machine, by a zero-CPU task pinned to its node (that node's
    py-spy); whatever stops it (py-spy missing or refused there, the node gone) is ``StackUnavailable``."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    task = ray.remote(num_cpus=0, max_retries=0)(_py_spy_json)
    pinned = task.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False))
    try:
        return parse_py_spy_json(ray.get(pinned.remote(pid), timeout=timeout_s))
    except Exception as err:  # a RayTaskError around StackUnavailable, a dead node, a timeout
        cause = getattr(err, "cause", None) or err
        if isinstance(cause, StackUnavailable):  # py-spy's own words, one line
            reason = str(cause)
        else:
            lines = [line.strip() for line in str(cause).splitlines() if line.strip()]
            reason = f"{type(cause).__name__}: {lines[-1] if lines else ''}"
        raise StackUnavailable(f"on node {node_id[:8]}: {reason}") from None


def _on_this_machine(pid: int, node_id: str | None, node_ip: str | None) -> bool:
    """True when the worker's node runs on this machine (same IP) and the pid exists here."""
    import ray

    if node_ip is None and node_id is not None:
        node_ip = next((n["NodeManagerAddress"] for n in ray.nodes() if n["NodeID"] == node_id), None)
    if node_ip is not None and node_ip != ray.util.get_node_ip_address():
        return False
    try:
        os.kill(pid, 0)  # signal 0: does the process exist (and may we signal it)?
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, another user's: py-spy will say whether it may read it
    return True


def dump(
    pid: int, node_id: str | None = None, node_ip: str | None = None
) -> tuple[dict[str, list[Frame]], str]:
    """A worker's threads and how they were read: py-spy here, or py-spy in a task on its node."""
    if _on_this_machine(pid, node_id, node_ip):
        return dump_local(pid), "py-spy"
    if node_id is None:
        raise StackUnavailable(f"pid {pid} runs on another machine, and its node is not known")
    return dump_on_its_node(pid, node_id), "py-spy on its node"


def train_workers(run_name: str | None = None) -> list[dict[str, Any]]:
    """The live workers of a run (rank, pid, node, actor id): from Ray Train's run state when tracking
    is on, else this job's alive ``RayTrainWorker`` actors from the state API (rank unknown)."""
    import ray

    if run_name is not None:
        try:
            workers = runstate.live_workers(run_name, job_id=ray.get_runtime_context().get_job_id())
            if not workers.empty:
                return [
                    {
                        "rank": int(w.world_rank),
                        "pid": int(w.pid),
                        "node_id": w.node_id,
                        "node_ip": w.node_ip,
                        "actor_id": w.actor_id,
                    }
                    for w in workers.itertuples()
                ]
        except runstate.TrainStateUnavailable:
            pass
    job = ray.get_runtime_context().get_job_id()
    return [
        {"rank": None, "pid": a["pid"], "node_id": a["node_id"], "node_ip": None, "actor_id": a["actor_id"]}
        for a in dashboard.alive_actors(WORKER_CLASS)
        if a["job_id"] == job
    ]


def worker_stacks(workers: list[dict[str, Any]]) -> list[WorkerStack]:
    """Dump every worker in ``workers`` (``train_workers()`` rows), ordered by rank. A worker whose
    stack cannot be read is kept, with no threads and the reason (``WorkerStack.unavailable``)."""
    stacks = []
    for w in workers:
        try:
            threads, source, unavailable = *dump(w["pid"], w.get("node_id"), w.get("node_ip")), None
        except StackUnavailable as err:
            threads, source, unavailable = {}, "no stack", str(err)
        stacks.append(
            WorkerStack(
                w["pid"],
                threads,
                w.get("rank"),
                w.get("node_id"),
                w.get("actor_id"),
                source,
                role=w.get("role", "rank"),
                unavailable=unavailable,
            )
        )
    return sorted(stacks, key=lambda s: (s.rank is None, s.rank if s.rank is not None else s.pid))


def actor_logs(class_name: str, job_id: str | None = None, exclude: Iterable[str] = ()) -> Iterator[str]:
    """The stderr logs (where Ray's warnings go) of this job's alive ``class_name`` actors, via the state
    API; ids in ``exclude`` are skipped (e.g. an earlier run's, still shutting down)."""
    import ray
    from ray.util.state import get_log

    address = ray.get_runtime_context().gcs_address
    job_id = job_id or ray.get_runtime_context().get_job_id()
    skip = set(exclude)
    for actor in dashboard.alive_actors(class_name):
        if actor["job_id"] != job_id or actor["class_name"] != class_name or actor["actor_id"] in skip:
            continue
        try:
            yield "".join(get_log(address=address, actor_id=actor["actor_id"], suffix="err", tail=200))
        except Exception:  # the actor's log file may not exist yet
            continue


def _barrier_warning(job_id: str | None = None, exclude: Iterable[str] = ()) -> str | None:
    """Ray Train's warning that a ``report`` barrier is missing ranks, from its SynchronizationActor's
    log (``get_log``: as soon as Ray prints it); ``exclude``: ids not to read (see ``HangWatch``)."""
    for text in actor_logs(SYNC_ACTOR_CLASS, job_id, exclude):
        if BARRIER_WARNING in text:
            return warning_block(text)
    return None


def warning_block(log: str) -> str:
    """The last barrier warning in a log: the lines from the one naming the call to the blank line after."""
    lines = log.splitlines()
    starts = [i for i, line in enumerate(lines) if BARRIER_WARNING in line]
    if not starts:
        return ""
    block = []
    for line in lines[starts[-1] :]:
        if not line.strip():
            break
        block.append(line.strip())
    return "\n".join(block)


class HangWatch:
    """Dump a run's workers once Ray's own signal says the hang is live; ``start()`` before ``fit()``,
    ``join()`` after (the watch runs on a thread).

    ``signal`` is polled every ``poll_s`` (default: Ray Train's barrier warning naming a missing
    rank, logged every ``RAY_TRAIN_COLLECTIVE_WARN_INTERVAL_S``); when it answers, every worker of
    ``run_name`` is dumped while the hang holds. The default reads only SynchronizationActors not
    alive at ``start()``: an earlier run's, still shutting down, keeps its own barrier warning.
    """

    def __init__(
        self,
        run_name: str,
        signal: Callable[[], str | None] | None = None,
        poll_s: float = 0.2,
        timeout_s: float = 300.0,
    ):
        self.run_name = run_name
        self.signal = signal or _barrier_warning
        self.poll_s = poll_s
        self.timeout_s = timeout_s
        self.warning: str | None = None
        self.stacks: list[WorkerStack] = []
        self.error: BaseException | None = None
        self.signalled_at: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="HangWatch", daemon=True)

    def start(self) -> HangWatch:
        if self.signal is _barrier_warning:
            earlier = {a["actor_id"] for a in dashboard.alive_actors(SYNC_ACTOR_CLASS)}
            self.signal = lambda: _barrier_warning(exclude=earlier)
        self._thread.start()
        return self

    def _run(self) -> None:
        deadline = time.monotonic() + self.timeout_s
        try:
            while not self._stop.is_set() and time.monotonic() < deadline:
                warning = self.signal()
                if warning:
                    self.signalled_at = time.time()
                    self.stacks = worker_stacks(train_workers(self.run_name))
                    self.warning = warning
                    return
                self._stop.wait(self.poll_s)
        except BaseException as err:  # shown by join(): a watch must not die silently
            self.error = err

    def report(self, headline: str) -> str:
        """``headline`` and what the watch saw (the warning, how long the dumps took, every stack), for
        an assertion's message: a dump that came too late shows as a long dump time."""
        took = max((s.taken_at for s in self.stacks), default=None)
        timing = (
            f"dumped {took - self.signalled_at:.1f} s after the warning was read"
            if took is not None and self.signalled_at is not None
            else "no dump taken"
        )
        lines = [headline, f"warning: {self.warning!r}", timing]
        lines += [stack.describe() for stack in self.stacks]
        return "\n".join(lines)

    def join(self, timeout_s: float = 10.0) -> HangWatch:
        """Stop watching (the run is over) and raise what went wrong in the watch, if anything."""
        self._stop.set()
        self._thread.join(timeout_s)
        if self.error is not None:
            raise self.error
        return self


class SplitHangError(RuntimeError):
    """A reader of a ``streaming_split`` waited too long: some other split was never read."""


class SplitReader:
    """Stands in for a training worker that reads its shard of ``Dataset.streaming_split``. Use as
    ``ray.remote(num_cpus=0)(SplitReader)``; ask ``where()`` before ``read_shard`` (it can block for ever)."""

    def where(self) -> dict[str, Any]:
        import ray

        return {"pid": os.getpid(), "node_id": ray.get_runtime_context().get_node_id()}

    def read_shard(self, shard: Any, batch_size: int = 256) -> int:
        rows = 0
        for batch in shard.iter_batches(batch_size=batch_size):
            rows += len(next(iter(batch.values())))
        return rows


def split_warning(job_id: str | None = None) -> str | None:
    """Ray Data's "blocked waiting on other clients" warning, from this job's SplitCoordinator logs."""
    for text in actor_logs(rayinternals.SPLIT_COORDINATOR_CLASS, job_id):
        lines = [line.strip() for line in text.splitlines() if rayinternals.SPLIT_WARNING in line]
        if lines:
            return lines[-1]
    return None


def wait_for(signal: Callable[[], str | None], timeout_s: float, poll_s: float = 0.5) -> str:
    """Poll ``signal`` until it answers; ``TimeoutError`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        answer = signal()
        if answer:
            return answer
        if time.monotonic() > deadline:
            raise TimeoutError(f"no answer from {getattr(signal, '__name__', signal)} within {timeout_s:g} s")
        time.sleep(poll_s)


def wait_for_readers(
    refs: list[Any], timeout_s: float, since: float, stacks: list[WorkerStack] = ()
) -> list[Any]:
    """``ray.get`` the readers' results, but raise ``SplitHangError`` instead of waiting for ever.
    ``since``: when the reads started (``time.monotonic()``); ``stacks`` name the idle readers (a
    reader whose stack py-spy could not read is not called idle: nothing says where it is)."""
    import ray

    try:
        return ray.get(refs, timeout=timeout_s)
    except ray.exceptions.GetTimeoutError:
        idle = [s for s in stacks if s.unavailable is None and not s.learner_frames(["read_shard"])]
        who = ", ".join(f"{s.role} {s.rank} (pid {s.pid})" for s in idle) or "another reader"
        raise SplitHangError(
            f"the reader(s) waiting on a streaming_split had no batch after {time.monotonic() - since:.0f} s: "
            f"a split starts an epoch only when every split's reader asks for it, and {who} never did. "
            "Every worker must iterate its shard every epoch (no `if rank == 0:` around the loop)."
        ) from None
