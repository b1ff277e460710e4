"""Start or connect to Ray once, and check that a run fits the cluster before it starts.

``start_ray()`` is safe to call in every notebook and twice in one kernel. With ``RAY_ADDRESS``
set it connects to that cluster (shipping ``course_utils`` to the workers); otherwise it starts
a local Ray whose dashboard listens on loopback only. A cluster that uses token authentication and
refuses this driver fails with what to set (the token's places: ``course_utils.internals.dashboard``).
``check_resources`` fails fast, in words, when a ScalingConfig can never fit the cluster.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import course_utils
from course_utils.core import config, storage
from course_utils.core.config import learner_namespace, profile_name
from course_utils.core.plan import per_worker_batch
from course_utils.internals import dashboard, logs, rayinternals

# A Ray CPU is a scheduling slot, not a core. Training workers and Ray Data tasks both take
# slots: with only 2 slots on a 2-core laptop, 2 training workers leave none for data tasks and
# a run with datasets= waits forever. Advertising at least 4 slots keeps both moving.
LOCAL_MIN_CPUS = 4

# Always: worker print() appears once, not twice, on the driver; Ray Train keeps its record of runs,
# attempts and workers (course_utils.internals.runstate), read from the driver's environment when fit() builds
# the controller's callbacks (ray/train/v2/api/data_parallel_trainer.py), also on a cluster; and a fit
# whose slots another learner holds waits for them quietly instead of Ray Train giving up on its
# worker group every 60 s with a traceback and trying again (counted as controller errors, not
# against max_failures). Train V2 passes RAY_TRAIN_* variables to the controller; lesson 04's
# elastic demo sets its own 3 s for one fit.
COURSE_ENV = {
    "RAY_TRAIN_ENABLE_PRINT_PATCH": "0",
    "RAY_TRAIN_ENABLE_STATE_TRACKING": "1",
    "RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S": "900",
}
# Smoke profile only: trims Ray Train's start-up (measured ≈ 25 s → ≈ 20 s per fit here) by
# skipping the preemption watcher and polling worker health faster. Ray Train's metrics
# (RAY_TRAIN_METRICS_ENABLED) stay on: lesson 02 plots them, and a 2-worker fit took the same
# time with them on or off (26.5 / 25.8 s on, 27.1 / 26.0 s off, measured alternately here).
SMOKE_ENV = {
    "RAY_TRAIN_ENABLE_PREEMPTION_WATCHER": "0",
    "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "0.5",
}


# The raylet's own settings (read when a node starts): its "Spilled N MiB, M objects, write throughput ..."
# line, sent to every driver's output whenever the object store spills (lesson 03's shuffle on a small
# node), stays in the node's log. start_ray sets it for the local Ray it starts; a host starting a
# cluster sets it on `ray start` (docs/hosting.md), as maintainer_tools.cluster.LocalCluster does.
RAYLET_ENV = {"RAY_verbose_spill_logs": "0"}


# Ray's disk guard marks a node out of disk once the disk that holds its session folder is 95% used
# (rayinternals.DISK_THRESHOLD_DEFAULT): it refuses to spill objects and prints an error into every
# cell, every 10 s. On a large disk 95% still leaves many gigabytes, and the course's runs write far
# less (checkpoints and data copies: ≈ 2 GB after every lesson here). So a local Ray the course starts
# keeps this much free instead, and the learner reads why, once (disk_guard).
DISK_HEADROOM_BYTES = 3 * 2**30


def disk_guard(
    temp_dir: str | Path, headroom: int = DISK_HEADROOM_BYTES
) -> tuple[dict[str, str], str | None]:
    """(raylet settings, note for the learner) for a local Ray whose session folder is under ``temp_dir``:
    nothing below Ray's 95% or when the learner set Ray's threshold; over it, the threshold that keeps
    ``headroom`` free, or (with less free) Ray's own guard and a note to free space first."""
    import shutil

    if rayinternals.DISK_THRESHOLD_ENV in os.environ:
        return {}, None
    folder = Path(temp_dir)
    while not folder.exists():
        folder = folder.parent
    usage = shutil.disk_usage(folder)
    used, limit = 1 - usage.free / usage.total, rayinternals.DISK_THRESHOLD_DEFAULT
    if used < limit:
        return {}, None

    def gib(size: float) -> str:
        return f"{size / 2**30:.1f} GB"

    where = (
        f"Note: the disk that holds Ray's session folder ({temp_dir}) is {used:.1%} full, "
        f"{gib(usage.free)} free of {gib(usage.total)}. Above {limit:.0%}, Ray refuses to spill objects "
        "to disk and prints an error every 10 s."
    )
    if usage.free < headroom:
        return {}, f"{where} The lessons write up to {gib(headroom)}: free some space on that disk first."
    threshold = f"{1 - headroom / usage.total:.4f}"
    return {rayinternals.DISK_THRESHOLD_ENV: threshold}, (
        f"{where} This local Ray keeps the last {gib(headroom)} free instead "
        f"({rayinternals.DISK_THRESHOLD_ENV}={threshold}); free some space when you can."
    )


class ResourceError(ValueError):
    """A run asks for more than the cluster has; raised before any training starts."""


@dataclass(frozen=True)
class RaySession:
    """What the notebooks print about the Ray they are using."""

    address: str
    dashboard_url: str | None
    cpus: float
    gpus: float
    nodes: int
    logs: str | None
    connected_to_existing: bool
    storage: storage.Storage  # where this learner's runs go: COURSE_STORAGE, resolved once

    def describe(self) -> str:
        where = "existing cluster" if self.connected_to_existing else "local Ray"
        return (
            f"{where} at {self.address}: {self.nodes} node(s), {self.cpus:g} CPU slots, {self.gpus:g} GPUs; "
            f"dashboard {self.dashboard_url or 'not running'}; Ray's logs in {self.logs or 'the head node'}"
        )


# The session start_ray last returned in this process: what a check that runs a fit for the learner
# (an exercise's) reads its storage from, so it writes where the lesson's own fits do.
_current: RaySession | None = None


def current() -> RaySession:
    """The session ``start_ray`` last returned in this process; a clear error when it has not run."""
    if _current is None:
        raise RuntimeError("Ray is not running: run the lesson's setup cell (session.start_ray()) first.")
    return _current


def _session(connected: bool, store: storage.Storage) -> RaySession:
    import ray

    ctx = ray.get_runtime_context()
    res = ray.cluster_resources()
    logs_dir = logs.session_logs_dir()
    return RaySession(
        address=ctx.gcs_address,
        dashboard_url=dashboard.dashboard_url(),
        cpus=res.get("CPU", 0.0),
        gpus=res.get("GPU", 0.0),
        nodes=len([n for n in ray.nodes() if n.get("Alive")]),
        logs=str(logs_dir) if logs_dir else None,
        connected_to_existing=connected,
        storage=store,
    )


def _course_settings(profile: str | None, store: storage.Storage) -> dict[str, str]:
    """The driver's course settings, resolved, for the workers of a cluster we connect to.

    Workers there run ``course_utils`` from the copy Ray shipped into ``runtime_resources``, so a
    default derived from the package's location would point inside that copy. The driver's values
    keep every worker on the same data, storage, profile (``auto`` on a GPU-less driver) and learner
    (a worker may run as another OS user). Credentials travel with the pickled ``storage_filesystem``.
    """

    settings = {
        "COURSE_PROFILE": config.profile_name(profile),
        "COURSE_DATA": str(config.data_root()),
        "COURSE_STORAGE": store.root,
        "COURSE_LEARNER": store.learner,
    }
    endpoint = config.s3_endpoint()
    if endpoint:
        settings["COURSE_S3_ENDPOINT"] = endpoint
    return settings


def start_ray(
    num_cpus: int | None = None, profile: str | None = None, verbose: bool = True, **init_kwargs: Any
) -> RaySession:
    """Start local Ray, or connect to ``RAY_ADDRESS``; a second call just reports the session.

    The driver joins the learner's Ray namespace (``course-<learner>``), where the course's actors
    live, so lesson 06 on a shared cluster finds this learner's actors and never another's.
    """
    import ray

    # Before any run or worker writes there: COURSE_STORAGE is writable and this learner's folder
    # exists with its ownership record. A bad setting fails here, in the first cell.
    # COURSE_STORAGE is read here, once: the session carries the value to every fit and reader.
    store = storage.resolve()
    store.prepare()
    connected = bool(os.environ.get("RAY_ADDRESS"))
    if not ray.is_initialized():
        init_kwargs.setdefault("namespace", learner_namespace())
        # Ray's INFO lines stay in its log folder (course_utils.internals.logs); describe() names it.
        init_kwargs.setdefault("logging_level", logs.DRIVER_LOG_LEVEL)
        # Ray's notice that token authentication is on (every local ray.init since 2.59): lesson 01
        # explains the token once; the notice's only advice is to turn it off.
        rayinternals.quiet_token_auth_notice()
        # A kernel stopped by Jupyter (SIGTERM) prints no C++ stack (rayinternals says why and how).
        rayinternals.quiet_driver_stop_stack()
        # Abseil's lock trace, which a Ray worker sometimes prints: nothing failed (rayinternals says why).
        rayinternals.skip_abseil_mutex_trace()
        env = dict(COURSE_ENV, **(SMOKE_ENV if profile_name(profile) == "smoke" else {}))
        env[rayinternals.DATA_LOG_LEVEL_ENV] = logs.DATA_LOG_LEVEL  # Ray Data's INFO lines: its log folder
        for key, value in env.items():
            os.environ.setdefault(key, value)  # local workers inherit the driver's environment
        logs.quiet_ray_data()  # this driver too, if it imported ray.data before
        if connected:
            # Every worker process of this job, on any node, runs the hook when it starts.
            env = dict(env, **_course_settings(profile, store))
            runtime_env = {
                "worker_process_setup_hook": logs.WORKER_SETUP_HOOK,
                "env_vars": env,
                "py_modules": [str(Path(course_utils.__file__).parent)],
            }
            context = _connect(os.environ["RAY_ADDRESS"], runtime_env, init_kwargs)
        else:
            # Local workers (and those of nodes this kernel starts) inherit the environment, so the
            # hook travels there, in the variable Ray's runtime_env would set, and the job has no
            # runtime_env: with one, the raylet starts every worker through setup_worker.py, a
            # second Python start-up per worker (batch inference started 1.3 s later, every fit later).
            os.environ.setdefault(rayinternals.worker_setup_hook_env_var(), logs.WORKER_SETUP_HOOK)
            if not config.in_checkout():
                # Installed on its own (a lesson's install cell): the default folders are the
                # notebook's, which a worker (started in Ray's session folder) cannot guess.
                os.environ.setdefault("COURSE_DATA", str(config.data_root()))
                os.environ.setdefault("COURSE_STORAGE", store.root)
            guard, note = disk_guard(init_kwargs.get("_temp_dir") or rayinternals.default_temp_dir())
            if note:
                print(note)
            for key, value in dict(RAYLET_ENV, **guard).items():
                os.environ.setdefault(key, value)  # the raylet this ray.init starts reads it
            cpus = num_cpus or max(os.cpu_count() or 1, LOCAL_MIN_CPUS)
            init_kwargs.setdefault("dashboard_host", "127.0.0.1")
            # "local": always a new Ray of our own. Without it ray.init() joins whatever cluster
            # `ray start` last recorded in /tmp/ray/ray_current_cluster (another notebook's or
            # test's), then fails with "num_cpus ... must not be provided".
            init_kwargs.setdefault("address", "local")
            context = ray.init(num_cpus=cpus, **init_kwargs)
        dashboard.remember_ray_context(context)
        # Ray Train's controller asks this actor for resources with a 5 s timeout; created now, it is
        # up long before the first fit (ready_for_fits waits for it, rayinternals says why).
        rayinternals.start_autoscaling_coordinator()
    session = _session(connected, store)
    global _current
    _current = session
    if verbose:
        print(session.describe())
    return session


def _connect(address: str, runtime_env: dict[str, Any], init_kwargs: dict[str, Any]) -> Any:
    """``ray.init`` on the cluster at ``address``; a cluster that refuses us for want of a token
    fails with what to set, in the course's words (Ray's own message is kept below it)."""
    import ray

    try:
        return ray.init(address=address, runtime_env=runtime_env, **init_kwargs)
    # Refused by the cluster: a ConnectionError; no token found here at all: Ray's AuthenticationError.
    except (ConnectionError, ray.exceptions.AuthenticationError) as err:
        if not _refused_for_token(err):
            raise
        token, where = dashboard.auth_token()
        found = (
            f"the token from {where}" if token else f"no token ({dashboard.TOKEN_ENV} unset, {where} missing)"
        )
        raise ConnectionError(
            f"The Ray cluster at {address} uses token authentication and refused this driver "
            f"({dashboard.AUTH_MODE_ENV}={os.environ.get(dashboard.AUTH_MODE_ENV, '<unset>')}, {found}). A driver joining it needs "
            f"`export {dashboard.AUTH_MODE_ENV}=token` and the cluster's token: {dashboard.TOKEN_ENV}=<token>, or the file named by "
            f"{dashboard.TOKEN_PATH_ENV}, or {dashboard.default_token_path()}. The host prints it with `ray get-auth-token` on the "
            "head node."
        ) from err


def _refused_for_token(error: BaseException) -> bool:
    """True when a failed ``ray.init`` was the cluster refusing this driver's token (or its absence).
    Ray 2.60 wraps it: a ConnectionError from a RuntimeError whose text holds "InvalidAuthToken"."""
    import ray

    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, ray.exceptions.AuthenticationError) or "InvalidAuthToken" in str(error):
            return True
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return False


def worker_count_bounds(num_workers: int | tuple[int, int]) -> tuple[int, int]:
    """(min, max) workers for a fixed count or an elastic ``(min, max)`` range, validated."""
    if isinstance(num_workers, tuple | list):
        if len(num_workers) != 2:
            raise ValueError(f"An elastic worker range is (min, max), got {num_workers!r}.")
        low, high = int(num_workers[0]), int(num_workers[1])
        if low < 1 or low > high:
            raise ValueError(
                f"Elastic num_workers=({low}, {high}) needs 1 <= min <= max, e.g. (1, {max(low, high)})."
            )
        return low, high
    if int(num_workers) < 1:
        raise ValueError(f"num_workers must be at least 1, got {num_workers}.")
    return int(num_workers), int(num_workers)


def resources_per_worker(scaling_config: Any) -> dict[str, float]:
    """What one training worker of ``scaling_config`` reserves, Ray Train's defaults filled in
    (1 CPU, or 1 GPU and no CPU with ``use_gpu``)."""
    per_worker = dict(scaling_config.resources_per_worker or {})
    use_gpu = bool(scaling_config.use_gpu)
    per_worker.setdefault("CPU", 0 if use_gpu else 1)
    if use_gpu:
        per_worker.setdefault("GPU", 1)
    return per_worker


def cpu_split(scaling_config: Any, cpu_slots: float | None = None) -> tuple[float, str]:
    """(CPU slots left for Ray Data, one sentence saying how the cluster's CPU slots divide) for a fit
    with ``scaling_config``; ``cpu_slots`` defaults to the running cluster's CPUs."""
    import ray

    slots = ray.cluster_resources().get("CPU", 0.0) if cpu_slots is None else float(cpu_slots)
    _, workers = worker_count_bounds(scaling_config.num_workers)
    per_worker = resources_per_worker(scaling_config)
    train = per_worker.get("CPU", 0.0) * workers
    left = slots - train
    if scaling_config.use_gpu:
        takes = f"{per_worker.get('GPU', 1):g} GPU" + (
            f" and {per_worker['CPU']:g} CPU slot(s)" if per_worker.get("CPU") else " and no CPU slot"
        )
        sentence = (
            f"CPU slots: {slots:g}. The {workers} training worker(s) take {takes} each, "
            f"so Ray Data has {left:g} CPU slot(s) to prepare batches."
        )
    else:
        sentence = (
            f"CPU slots: {slots:g} (LOCAL_MIN_CPUS = {LOCAL_MIN_CPUS} on a laptop): {train:g} for the {workers} "
            f"training worker(s), {left:g} for Ray Data."
        )
    return left, sentence


# How long a fit's preflight waits for Ray's autoscaling coordinator to answer (it starts in seconds).
COORDINATOR_READY_S = 120.0


def ready_for_fits(timeout_s: float = COORDINATOR_READY_S) -> bool:
    """Wait until Ray's autoscaling coordinator answers, creating it if needed; True once it does.

    Every fit's controller gives it 5 s (``rayinternals.start_autoscaling_coordinator`` says why that
    fails on a fresh node): waiting here turns that race into a short wait. False, silently, when it
    does not answer in ``timeout_s`` or this Ray has none: the fit then runs as without the course.
    """
    import ray

    if not ray.is_initialized():
        return False
    try:
        coordinator = rayinternals.start_autoscaling_coordinator()
        ray.get(coordinator.__ray_ready__.remote(), timeout=timeout_s)
    except Exception:  # a Ray without it, or a cluster too busy to start it: the fit's own request decides
        return False
    return True


def check_resources(scaling_config: Any, global_batch: int | None = None) -> None:
    """Fail fast, in plain words, when a ScalingConfig cannot fit the running cluster (Ray Train
    would wait for ever). Elastic configs need only their minimum to fit. With ``global_batch``,
    also check it splits evenly across the maximum and minimum worker counts."""
    import ray

    low, high = worker_count_bounds(scaling_config.num_workers)
    if global_batch is not None:
        for n in {low, high}:
            per_worker_batch(global_batch, n)
    per_worker = resources_per_worker(scaling_config)
    have = ray.cluster_resources()
    for name, amount in per_worker.items():
        need = amount * low
        if need > have.get(name, 0):
            raise ResourceError(
                f"{low} worker(s) x {amount:g} {name} = {need:g} {name}, but the cluster has "
                f"{have.get(name, 0):g} {name}. Use fewer workers"
                + (" or set use_gpu=False" if name == "GPU" else "")
                + (f" (at most {int(have.get(name, 0) // amount)} here)" if amount else "")
                + "."
            )
