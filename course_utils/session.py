"""Start or connect to Ray once, and check a run fits the cluster before it starts.

``start_ray()`` is safe to call in every notebook and twice in one kernel. With ``RAY_ADDRESS``
set it connects to that cluster (shipping ``course_utils`` to the workers); otherwise it starts
a local Ray whose dashboard listens on loopback only.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# A Ray CPU is a scheduling slot, not a core. Training workers and Ray Data tasks both take
# slots: with only 2 slots on a 2-core laptop, 2 training workers leave none for data tasks and
# a run with datasets= waits forever. Advertising at least 4 slots keeps both moving.
LOCAL_MIN_CPUS = 4

# Always: worker print() appears once, not twice, on the driver; and Ray Train keeps its record of
# runs, attempts and workers, which the dashboard serves at /api/train/v2/runs/v1 (course_utils.runstate).
# Train V2 reads RAY_TRAIN_ENABLE_STATE_TRACKING in the driver, when fit() builds the controller's callbacks
# (ray/train/v2/api/data_parallel_trainer.py): the driver's environment is what counts, also on a cluster.
COURSE_ENV = {"RAY_TRAIN_ENABLE_PRINT_PATCH": "0", "RAY_TRAIN_ENABLE_STATE_TRACKING": "1"}
# Smoke profile only: trims Ray Train's start-up (measured ≈ 25 s → ≈ 20 s per fit here) by
# skipping the preemption watcher and polling worker health faster. Ray Train's metrics
# (RAY_TRAIN_METRICS_ENABLED) stay on: lesson 02 plots them, and a 2-worker fit took the same
# time with them on or off (26.5 / 25.8 s on, 27.1 / 26.0 s off, measured alternately here).
SMOKE_ENV = {
    "RAY_TRAIN_ENABLE_PREEMPTION_WATCHER": "0",
    "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "0.5",
}


class StateApiUnavailable(RuntimeError):
    """Ray's state API cannot answer because the dashboard that serves it is not running."""


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

    def describe(self) -> str:
        where = "existing cluster" if self.connected_to_existing else "local Ray"
        return (
            f"{where} at {self.address}: {self.nodes} node(s), {self.cpus:g} CPU slots, {self.gpus:g} GPUs; "
            f"dashboard {self.dashboard_url or 'not running'}; Ray's logs in {self.logs or 'the head node'}"
        )


def dashboard_url() -> str | None:
    """This process's Ray dashboard as an ``http://`` URL; None when it is not running (no ray[default])."""
    from ray._private.worker import get_dashboard_url  # no public getter after ray.init returns

    address = get_dashboard_url()
    return None if not address else address if address.startswith("http") else f"http://{address}"


def _session(connected: bool) -> RaySession:
    import ray

    ctx = ray.get_runtime_context()
    res = ray.cluster_resources()
    logs = None
    try:
        from ray._private.worker import _global_node

        logs = str(Path(_global_node.get_session_dir_path()) / "logs") if _global_node else None
    except Exception:
        pass
    return RaySession(
        address=ctx.gcs_address,
        dashboard_url=dashboard_url(),
        cpus=res.get("CPU", 0.0),
        gpus=res.get("GPU", 0.0),
        nodes=len([n for n in ray.nodes() if n.get("Alive")]),
        logs=logs,
        connected_to_existing=connected,
    )


def _course_settings(profile: str | None) -> dict[str, str]:
    """The driver's course settings, resolved, for the workers of a cluster we connect to.

    On a cluster the workers run ``course_utils`` from the copy Ray shipped into its
    ``runtime_resources`` folder, so a default derived from the package's location (the data
    folder next to the repo) would point inside that copy. Absolute values from the driver
    keep every worker on the same data and storage (the profile too, so ``auto`` means the
    same on a GPU-less driver and a GPU worker), and the learner (a worker may run as another
    OS user, whose name would be another learner's folder). Credentials are not shipped: S3
    access travels with the ``storage_filesystem`` object Ray pickles for its workers.
    """
    from course_utils import config

    settings = {
        "COURSE_PROFILE": config.profile_name(profile),
        "COURSE_DATA": str(config.data_root()),
        "COURSE_STORAGE": config.storage_root(),
        "COURSE_LEARNER": config.learner(),
    }
    endpoint = config.s3_endpoint()
    if endpoint:
        settings["COURSE_S3_ENDPOINT"] = endpoint
    return settings


def start_ray(
    num_cpus: int | None = None, profile: str | None = None, verbose: bool = True, **init_kwargs: Any
) -> RaySession:
    """Start local Ray, or connect to ``RAY_ADDRESS``; a second call just reports the session.

    The driver joins the learner's Ray namespace (``course-<learner>``): the course's actors,
    Ray Data's actor pools included, live there, so lesson 06 on a shared cluster finds this
    learner's actors and never another learner's.
    """
    import ray

    from course_utils import storage
    from course_utils.config import learner_namespace, profile_name

    # Before any run or worker writes there: COURSE_STORAGE is writable and this learner's folder
    # exists with its ownership record. A bad setting fails here, in the first cell.
    storage.prepare_learner_storage()
    connected = bool(os.environ.get("RAY_ADDRESS"))
    if not ray.is_initialized():
        from course_utils import logs

        init_kwargs.setdefault("namespace", learner_namespace())
        # Ray's INFO lines stay in its log folder (course_utils.logs); describe() names it.
        init_kwargs.setdefault("logging_level", logs.DRIVER_LOG_LEVEL)
        env = dict(COURSE_ENV, **(SMOKE_ENV if profile_name(profile) == "smoke" else {}))
        for key, value in env.items():
            os.environ.setdefault(key, value)  # local workers inherit the driver's environment
        if connected:
            import course_utils

            # Every worker process of this job, on any node, runs the hook when it starts.
            env = dict(env, **_course_settings(profile))
            runtime_env = {
                "worker_process_setup_hook": logs.WORKER_SETUP_HOOK,
                "env_vars": env,
                "py_modules": [str(Path(course_utils.__file__).parent)],
            }
            ray.init(address=os.environ["RAY_ADDRESS"], runtime_env=runtime_env, **init_kwargs)
        else:
            # Local workers (and those of nodes this kernel starts) inherit the environment, so the
            # hook travels there, in the variable Ray's runtime_env would set, and the job has no
            # runtime_env: with one, the raylet starts every worker through setup_worker.py, a
            # second Python start-up per worker (batch inference started 1.3 s later, every fit later).
            from ray._private.ray_constants import WORKER_PROCESS_SETUP_HOOK_ENV_VAR

            os.environ.setdefault(WORKER_PROCESS_SETUP_HOOK_ENV_VAR, logs.WORKER_SETUP_HOOK)
            cpus = num_cpus or max(os.cpu_count() or 1, LOCAL_MIN_CPUS)
            init_kwargs.setdefault("dashboard_host", "127.0.0.1")
            # "local": always a new Ray of our own. Without it ray.init() joins whatever cluster
            # `ray start` last recorded in /tmp/ray/ray_current_cluster (another notebook's or
            # test's), then fails with "num_cpus ... must not be provided".
            init_kwargs.setdefault("address", "local")
            ray.init(num_cpus=cpus, **init_kwargs)
    session = _session(connected)
    if verbose:
        print(session.describe())
    return session


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


def check_resources(scaling_config: Any, global_batch: int | None = None) -> None:
    """Fail fast, in plain words, when a ScalingConfig cannot fit the running cluster.

    Without this a too-big request does not fail: Ray Train waits for resources that never
    come. Elastic configs need only their minimum to fit. With ``global_batch`` also checks it
    splits evenly across the maximum and minimum worker counts.
    """
    import ray

    from course_utils.plan import per_worker_batch

    low, high = worker_count_bounds(scaling_config.num_workers)
    if global_batch is not None:
        for n in {low, high}:
            per_worker_batch(global_batch, n)
    per_worker = dict(scaling_config.resources_per_worker or {})
    use_gpu = bool(scaling_config.use_gpu)
    per_worker.setdefault("CPU", 0 if use_gpu else 1)
    if use_gpu:
        per_worker.setdefault("GPU", 1)
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


def _state_address() -> str:
    """This driver's cluster, for the state API.

    Without an address the state API auto-detects Ray on the machine and fails with
    "Found multiple active Ray instances" when two notebooks each started one.
    """
    import ray

    if not ray.is_initialized():
        raise RuntimeError("Ray is not running in this process: call course_utils.session.start_ray() first.")
    if not dashboard_url():
        raise StateApiUnavailable(
            "The Ray dashboard is not running, and the state API is served by it. It needs the `default` extra "
            "(ray[default], in requirements.txt) and can fail to start on an overloaded machine: see "
            "dashboard.log in the session's logs folder, then restart the kernel."
        )
    return ray.get_runtime_context().gcs_address


def alive_actors(class_substring: str = "") -> list[dict[str, Any]]:
    """Alive actors from Ray's state API (needs the dashboard), optionally filtered by class.

    Each row has the actor's class, id, pid, node, name, Ray namespace and job id.
    """
    from ray.util.state import list_actors

    actors = list_actors(address=_state_address(), filters=[("state", "=", "ALIVE")], limit=1000, detail=True)
    rows = [
        {
            "class_name": a.class_name,
            "actor_id": a.actor_id,
            "pid": a.pid,
            "node_id": a.node_id,
            "name": a.name,
            "namespace": a.ray_namespace,
            "job_id": a.job_id,
        }
        for a in actors
    ]
    return [r for r in rows if class_substring in (r["class_name"] or "")]


TRAIN_ACTOR_CLASSES = ("TrainController", "RayTrainWorker")


def train_actors() -> list[dict[str, Any]]:
    """Ray Train's controller and worker actors in any state (alive during a fit, dead after)."""
    from ray.util.state import list_actors

    rows = []
    for cls in TRAIN_ACTOR_CLASSES:
        for a in list_actors(
            address=_state_address(), filters=[("class_name", "=", cls)], limit=1000, detail=True
        ):
            rows.append(
                {"class_name": a.class_name, "state": a.state, "pid": a.pid, "actor_id": a.actor_id[:12]}
            )
    return rows
