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

# Always: worker print() appears once, not twice, on the driver.
COURSE_ENV = {"RAY_TRAIN_ENABLE_PRINT_PATCH": "0"}
# Smoke profile only: trims Ray Train's start-up (measured ≈ 25 s → ≈ 20 s per fit here) by
# skipping the preemption watcher and metrics export and polling worker health faster.
SMOKE_ENV = {
    "RAY_TRAIN_ENABLE_PREEMPTION_WATCHER": "0",
    "RAY_TRAIN_METRICS_ENABLED": "0",
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
            f"dashboard {self.dashboard_url or 'not running'}; worker logs in {self.logs or 'the head node'}"
        )


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
    from ray._private.worker import get_dashboard_url  # no public getter after ray.init returns

    dashboard = get_dashboard_url()
    return RaySession(
        address=ctx.gcs_address,
        dashboard_url=f"http://{dashboard}" if dashboard else None,
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

    from course_utils.config import learner_namespace, profile_name

    connected = bool(os.environ.get("RAY_ADDRESS"))
    if not ray.is_initialized():
        init_kwargs.setdefault("namespace", learner_namespace())
        env = dict(COURSE_ENV, **(SMOKE_ENV if profile_name(profile) == "smoke" else {}))
        for key, value in env.items():
            os.environ.setdefault(key, value)  # local workers inherit the driver's environment
        if connected:
            import course_utils

            env = dict(env, **_course_settings(profile))
            runtime_env = {"env_vars": env, "py_modules": [str(Path(course_utils.__file__).parent)]}
            ray.init(address=os.environ["RAY_ADDRESS"], runtime_env=runtime_env, **init_kwargs)
        else:
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
    from ray._private.worker import get_dashboard_url

    if not get_dashboard_url():
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


_NODE_PORT_FLAGS = (
    "dashboard-agent-listen-port",
    "dashboard-agent-grpc-port",
    "runtime-env-agent-port",
    "metrics-export-port",
)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ExtraNode:
    """A second Ray node on this machine (``ray start --address ... --block``), to show elastic
    training: Ray Train sizes an elastic worker group from the nodes' *total* resources, so
    holding CPUs with an actor does not shrink it, but a node joining (or leaving) does.

    The node runs in its own process group, which ``stop()`` ends; nothing else is touched.
    This machine only: a local Ray, or a cluster whose head runs here (``add_local_nodes`` checks).
    It advertises no GPUs by default (``num_gpus=0``): it shares this machine's GPUs with the
    head, and counting them twice would put two ranks on one GPU.
    """

    def __init__(self, num_cpus: int = 1, resources: dict[str, float] | None = None, num_gpus: int = 0):
        self.num_cpus, self.num_gpus, self.resources = num_cpus, num_gpus, dict(resources or {})
        self.process = None
        self.temp_dir: Path | None = None  # the node's own --temp-dir; deleted by stop() once it joined
        self.log: Path | None = None  # the node's `ray start` output (in temp_dir)
        self.node_id: str | None = None
        self.error: BaseException | None = None
        self.stopped_at: float | None = None

    def start(self, timeout_s: float = 120.0) -> ExtraNode:
        """Start the node and wait until the cluster lists it alive."""
        import json
        import subprocess
        import sys
        import tempfile
        import time

        import ray

        before = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
        ray_cli = Path(sys.executable).with_name("ray")
        # A temp dir of its own (short: Ray's unix sockets live under it). Sharing the head's would
        # make this node's log monitor replay every earlier worker's output into the notebook, and
        # `ray start` would record this cluster as the machine's default one for any later ray.init().
        self.temp_dir = Path(tempfile.mkdtemp(prefix="rx-", dir="/tmp"))
        self.log = self.temp_dir / "ray-start.log"
        fd = os.open(self.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.process = subprocess.Popen(
            [
                str(ray_cli),
                "start",
                f"--address={ray.get_runtime_context().gcs_address}",
                f"--num-cpus={self.num_cpus}",
                f"--num-gpus={self.num_gpus}",
                f"--resources={json.dumps(self.resources)}",
                f"--temp-dir={self.temp_dir}",
                "--block",
                "--disable-usage-stats",
                # Fixed default ports (e.g. the dashboard agent's 52365) are taken by the head
                # node on the same machine: give this node free ones.
                *(f"--{flag}={_free_port()}" for flag in _NODE_PORT_FLAGS),
            ],
            stdout=fd,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: stop() ends exactly this node
            # A loaded machine starts the node's agents slowly: give them longer than the default.
            env={**os.environ, "RAY_ADDRESS": "", "RAY_agent_register_timeout_ms": "120000"},
        )
        os.close(fd)  # the node writes to its own copy of the descriptor
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            new = [n for n in ray.nodes() if n["Alive"] and n["NodeID"] not in before]
            if new:
                self.node_id = new[0]["NodeID"]
                print(f"[driver] node {self.node_id[:12]} joined with {self.resources or {}} ", flush=True)
                return self
            if self.process.poll() is not None:
                break
            time.sleep(0.5)
        exited = self.process.poll() is not None
        self.stop()
        lines = [line.strip() for line in self.log.read_text(errors="replace").splitlines() if line.strip()]
        said = f": {lines[-1][:300]}" if lines else ""
        raise RuntimeError(
            "The extra Ray node did not join the cluster "
            + ("(its `ray start` exited)" if exited else f"within {timeout_s:.0f} s")
            + f"{said} (`ray start` output in {self.log})."
        )

    def start_when(self, condition, poll_s: float = 0.5, timeout_s: float = 600.0) -> None:
        """Start from a daemon thread once ``condition()`` is true (a node joining mid-run)."""
        self._when(condition, self.start, poll_s, timeout_s)

    def stop_when(self, condition, poll_s: float = 0.5, timeout_s: float = 600.0) -> None:
        """Stop from a daemon thread once ``condition()`` is true (a node lost mid-run)."""
        self._when(condition, self.stop, poll_s, timeout_s)

    def _when(self, condition, action, poll_s: float, timeout_s: float) -> None:
        import threading
        import time

        def wait() -> None:
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline:
                try:
                    if condition():
                        break
                except Exception:  # a condition that fails now may hold later (file mid-write)
                    pass
                time.sleep(poll_s)
            try:
                action()
            except Exception as exc:  # a thread must not fail silently: keep it for the caller
                self.error = exc
                print(f"[driver] extra node: {action.__name__} failed: {exc}", flush=True)

        threading.Thread(target=wait, name="extra-node", daemon=True).start()

    def stop(self) -> None:
        """End the node abruptly, like a machine losing power: SIGKILL its process group (idempotent)."""
        import signal
        import time

        if self.process is not None and self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.process.wait(timeout=30)
            self.stopped_at = time.time()
            print("[driver] extra node killed: its processes, and the worker on it, are gone", flush=True)
        if self.node_id and self.temp_dir is not None:  # it joined: nothing in its start-up output to read
            import shutil

            shutil.rmtree(self.temp_dir, ignore_errors=True)


def _is_this_machine(host: str) -> bool:
    """True when ``host`` is an address of this machine (a socket can bind to it here)."""
    import socket

    try:
        with socket.socket() as s:
            s.bind((socket.gethostbyname(host), 0))
        return True
    except OSError:
        return False


def extra_node_blocker() -> str | None:
    """Why an ``ExtraNode`` cannot join this process's Ray from this machine, in one line; or None.

    A local Ray always can. A cluster we connected to (``RAY_ADDRESS``) can when its head runs on
    this machine (a host trying the course, ``cluster.LocalCluster``). When the head is elsewhere,
    adding this machine as a node would let a shared cluster schedule other people's work here,
    and killing it would not be a node of that cluster leaving: the demo is not run.
    """
    import ray

    if not os.environ.get("RAY_ADDRESS"):
        return None
    address = ray.get_runtime_context().gcs_address
    if _is_this_machine(address.rsplit(":", 1)[0]):
        return None
    return (
        f"the cluster at {address} runs on other machines, and this demo would add this machine to it as a "
        "node and kill that node (on a cluster of your own, stop a worker node during an elastic run instead)"
    )


def add_local_nodes(
    count: int, num_cpus: int = 1, resources: dict[str, float] | None = None
) -> tuple[list[ExtraNode], str | None]:
    """Start ``count`` ``ExtraNode``s and return ``(nodes, None)``, or ``([], why not)`` in one line.

    On a local Ray a node that fails to join raises (a bug to see). On a cluster we connected to,
    the reason is returned instead (``extra_node_blocker``, or the node's own error), so the
    section that needs the nodes can say in one line why it is skipped there.
    """
    import ray

    reason = extra_node_blocker()
    if reason:
        return [], reason
    nodes: list[ExtraNode] = []
    try:
        for _ in range(count):
            nodes.append(ExtraNode(num_cpus=num_cpus, resources=resources).start())
    except RuntimeError as err:
        for node in nodes:
            node.stop()
        if not os.environ.get("RAY_ADDRESS"):
            raise
        address = ray.get_runtime_context().gcs_address
        return [], f"a Ray node started on this machine could not join the cluster at {address}: {err}"
    return nodes, None
