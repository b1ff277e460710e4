"""A real multi-node Ray cluster on one machine, to try the "existing cluster" path of the course.

``LocalCluster`` runs ``ray start --head`` and one ``ray start --address=...`` per extra node,
each ``--block``-ing in its own process group, with its own ``--temp-dir``, loopback address
(``127.0.0.2``, ``127.0.0.3``, ...) and free ports, so it never collides with a Ray that a notebook (or another user) runs on the machine.
``stop()`` ends exactly those process groups and nothing else: never ``ray stop``, which stops
every Ray on the machine.

``ExtraNode`` / ``add_local_nodes`` (lesson 04's elastic demo) start one more Ray node on this
machine and join it to the Ray this process already runs or connected to; ``stop()`` kills
exactly that node's process group. This module starts and ends Ray processes;
``course_utils.session`` connects to Ray and queries it. For the same demo it also reads what an
elastic run's controller decided (``scaling_decisions``, from Ray Train's controller log) and asks
Ray's autoscaling coordinator to re-read the nodes (``refresh_autoscaling_coordinator``).

Connect a course process to it with ``cluster.driver_env()`` (``RAY_ADDRESS=<cluster.address>``
and ``RAY_AUTH_MODE=token``): ``session.start_ray()`` then joins the cluster instead of starting
Ray. Every node here sees the same disk, so a local ``COURSE_STORAGE`` folder counts as shared
storage; on real machines it would not.

Token authentication, as a workshop host sets it up: the token is where Ray looks for it
(``RAY_AUTH_TOKEN``, ``RAY_AUTH_TOKEN_PATH``, else ``~/.ray/auth_token``, made by ``ray get-auth-token
--generate`` when missing, as a local ``ray.init()`` makes it), and every node and driver runs
with ``RAY_AUTH_MODE=token``. Ray's defaults alone (2.60) are not enough for a cluster: ``ray start
--head`` turns token auth on only if a token exists, and a node or driver given an explicit
address never does, so it would be refused by a head that has it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from course_utils import rayinternals, session


@dataclass
class NodeSpec:
    """Resources one node advertises (``ray start --num-cpus/--num-gpus/--resources``).

    ``num_gpus`` declares GPUs Ray schedules by, whether or not this machine has them: on a
    machine without one, actors and pools that ask for GPUs are placed exactly as on a GPU node
    (torch, seeing no CUDA, then runs them on the CPU). The GPU-shaped test tier uses it.
    """

    num_cpus: int = 2
    resources: dict[str, float] = field(default_factory=dict)
    num_gpus: int | None = None  # None: Ray counts this machine's GPUs, as a plain `ray start` does


class LocalCluster:
    """Head node + extra nodes on this machine; use as a context manager so it always stops."""

    def __init__(
        self,
        head: NodeSpec | None = None,
        nodes: list[NodeSpec] | None = None,
        object_store_mb: int = 150,
        dashboard: bool = False,
    ):
        """``dashboard=True`` starts the head with Ray's dashboard (and so the state API), as a
        plain ``ray start --head`` does; it costs ≈ 10 s more start-up here."""
        self.head = head or NodeSpec()
        self.dashboard = dashboard
        self.dashboard_url: str | None = None
        self.nodes = list(nodes if nodes is not None else [NodeSpec(resources={"node2": 1})])
        self.object_store_mb = object_store_mb
        self.temp_root: Path | None = None
        self.address: str | None = None
        self._processes: list[subprocess.Popen] = []

    def _ray_start(self, spec: NodeSpec, index: int, extra: list[str]) -> subprocess.Popen:
        temp_dir = self.temp_root / f"n{index}"  # a short path: Ray's unix sockets live under it
        log = open(self.temp_root / f"node{index}.log", "ab")  # the node writes to it until it stops
        command = [
            str(Path(sys.executable).with_name("ray")),
            "start",
            *extra,
            f"--num-cpus={spec.num_cpus}",
            *([f"--num-gpus={spec.num_gpus}"] if spec.num_gpus is not None else []),
            f"--resources={json.dumps(spec.resources)}",
            f"--object-store-memory={self.object_store_mb * 1024 * 1024}",
            f"--temp-dir={temp_dir}",
            f"--node-ip-address={node_ip(index)}",
            f"--node-manager-port={free_port()}",
            f"--object-manager-port={free_port()}",
            *(f"--{flag}={free_port()}" for flag in _NODE_PORT_FLAGS),
            "--block",
            "--disable-usage-stats",
        ]
        env = {
            **os.environ,
            "RAY_ADDRESS": "",  # never join a cluster named in this shell
            "RAY_AUTH_MODE": "token",  # every node: the head requires the token, the others present it
            # A raylet waits for its node's agents (Python processes) to start; on a busy laptop
            # they can miss the default deadline and the node aborts. Give them longer.
            "RAY_agent_register_timeout_ms": "120000",
            # The raylet's "Spilled N MiB ..." line reaches every driver as red output (lesson 03's shuffle
            # spills on a small node); the spilling itself is in the node's logs. A host does the same.
            **session.RAYLET_ENV,
        }
        if spec.num_gpus is not None:
            # A declared count is checked against CUDA_VISIBLE_DEVICES when it is set ("Attempting to
            # start raylet with 1 GPU, but CUDA_VISIBLE_DEVICES contains []"): the node is told, not asked.
            env.pop("CUDA_VISIBLE_DEVICES", None)
        process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env
        )
        self._processes.append(process)
        return process

    def start(self, timeout_s: float = 180.0, attempts: int = 3) -> LocalCluster:
        """Start the head, then the other nodes, each waited for until ``ray start`` says it runs.

        On a busy machine a node can miss Ray's own start-up deadlines (its raylet waits 30 s for
        the node's agents); such a node is started again, up to ``attempts`` times.
        """
        self.temp_root = Path(tempfile.mkdtemp(prefix="rc-", dir="/tmp"))
        ensure_auth_token()
        for attempt in range(1, attempts + 1):
            port, dashboard_port = free_port(), free_port()
            self.address = f"{node_ip(0)}:{port}"
            if self.dashboard:
                self.dashboard_url = f"http://{node_ip(0)}:{dashboard_port}"
            head = self._ray_start(
                self.head,
                0,
                [
                    "--head",
                    f"--port={port}",
                    f"--include-dashboard={'true' if self.dashboard else 'false'}",
                    f"--dashboard-host={node_ip(0)}",
                    f"--dashboard-port={dashboard_port}",  # checked even without a dashboard
                    "--no-monitor",  # no autoscaler: the nodes are fixed
                    f"--ray-client-server-port={free_port()}",
                ],
            )
            if self._wait_started(head, 0, timeout_s):
                break
            _end_group(head)
            self._processes.remove(head)
            if attempt == attempts:
                self.stop(keep_logs=True)
                raise RuntimeError(f"The Ray head did not start; see {self.temp_root / 'node0.log'}.")
        for index, spec in enumerate(self.nodes, start=1):
            for attempt in range(1, attempts + 1):
                node = self._ray_start(spec, index, [f"--address={self.address}"])
                if self._wait_started(node, index, timeout_s):
                    break
                _end_group(node)
                self._processes.remove(node)
                if attempt == attempts:
                    self.stop(keep_logs=True)
                    raise RuntimeError(
                        f"Ray node {index} did not start; see {self.temp_root}/node{index}.log."
                    )
        return self

    def _wait_started(self, process: subprocess.Popen, index: int, timeout_s: float) -> bool:
        """True once ``ray start`` logged that the node runs; False if it died or timed out."""
        log = self.temp_root / f"node{index}.log"
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if "Ray runtime started" in log.read_text(errors="replace"):
                return True
            if process.poll() is not None:
                return False
            time.sleep(0.5)
        return False

    def driver_env(self) -> dict[str, str]:
        """What a driver's environment needs to join this cluster: its address and token auth on
        (the token itself it finds where ``ray start`` found it, on this machine)."""
        return {"RAY_ADDRESS": self.address or "", "RAY_AUTH_MODE": "token"}

    @property
    def node_count(self) -> int:
        """How many nodes this cluster has once every one joined."""
        return 1 + len(self.nodes)

    def stop(self, keep_logs: bool = False) -> None:
        """End each node's process group (SIGTERM, then SIGKILL after 30 s), then delete the
        cluster's temp dir unless ``keep_logs``. Idempotent."""
        for process in reversed(self._processes):
            _end_group(process)
        self._processes.clear()
        if self.temp_root is not None and not keep_logs:
            shutil.rmtree(self.temp_root, ignore_errors=True)

    def logs(self) -> str:
        """The ``ray start`` output of every node (for a test's failure message)."""
        if self.temp_root is None:
            return ""
        return "\n".join(
            f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}"
            for p in sorted(self.temp_root.glob("node*.log"))
        )

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def ensure_auth_token() -> None:
    """Make sure Ray finds an auth token on this machine, as a host does before ``ray start --head``:
    ``ray get-auth-token --generate`` writes ``~/.ray/auth_token`` when no token is found
    (``RAY_AUTH_TOKEN``, ``RAY_AUTH_TOKEN_PATH`` and the file are looked at first, as by Ray)."""
    from course_utils.session import auth_token

    if auth_token()[0]:
        return
    done = subprocess.run(
        [str(Path(sys.executable).with_name("ray")), "get-auth-token", "--generate"],
        capture_output=True,  # it prints the token: keep it out of logs
        text=True,
        env={**os.environ, "RAY_ADDRESS": ""},
    )
    if done.returncode != 0:
        raise RuntimeError(f"`ray get-auth-token --generate` failed: {done.stderr.strip()[-500:]}")


def wait_for_nodes(count: int, timeout_s: float = 120.0) -> list[dict[str, Any]]:
    """From a process connected to the cluster: wait until ``count`` nodes are alive; return them."""
    import ray

    deadline = time.monotonic() + timeout_s
    while True:
        alive = [n for n in ray.nodes() if n["Alive"]]
        if len(alive) >= count:
            return alive
        if time.monotonic() > deadline:
            raise TimeoutError(f"Only {len(alive)} of {count} Ray nodes joined within {timeout_s:.0f} s.")
        time.sleep(0.5)


def train_loop_recording_node(config: dict[str, Any]) -> None:
    """Lesson 02's ``train_loop_per_worker`` that first records which node each rank runs on.

    Writes ``<config["node_log_dir"]>/rank<N>.json`` with the node id and IP, then trains as usual.
    ``node_log_dir`` must be a folder every node can write (shared storage).
    """
    import ray
    import ray.train

    from course_utils.lesson_code import train_loop_per_worker

    ctx = ray.train.get_context()
    out = Path(config["node_log_dir"])
    out.mkdir(parents=True, exist_ok=True)
    runtime = ray.get_runtime_context()
    record = {
        "rank": ctx.get_world_rank(),
        "node_id": runtime.get_node_id(),
        "ip": ray.util.get_node_ip_address(),
        "pid": os.getpid(),
    }
    (out / f"rank{ctx.get_world_rank()}.json").write_text(json.dumps(record))
    train_loop_per_worker(config)


def node_ip(index: int) -> str:
    """Node ``index``'s own loopback address (127.0.0.2, .3, ...): Ray swaps 127.0.0.1 for the
    machine's network address, any other loopback address it keeps, so all traffic stays local
    and each node has an address of its own, as on separate machines."""
    return f"127.0.0.{index + 2}"


def _end_group(process: subprocess.Popen, grace_s: float = 30.0) -> None:
    """End ``process``'s own process group: SIGTERM, then SIGKILL after ``grace_s`` seconds."""
    if process.poll() is not None:
        return
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)
        except ProcessLookupError:
            pass
    except ProcessLookupError:
        pass


_NODE_PORT_FLAGS = (
    "dashboard-agent-listen-port",
    "dashboard-agent-grpc-port",
    "runtime-env-agent-port",
    "metrics-export-port",
)


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (for a node's or a server's flags)."""
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
        self.stop_sent_at: float | None = None  # wall clock when stop() signalled the node
        self.joined_at: float | None = None  # time.monotonic() when the cluster first listed it alive
        self.joined_time: float | None = None  # the same moment by the wall clock (Ray's logs use it)
        self.gone_time: float | None = None  # wall clock when the cluster first listed it dead (wait_gone)
        self._ports: dict[str, int] = {}
        self._joiner: threading.Thread | None = None

    def start(self, timeout_s: float = 120.0) -> ExtraNode:
        """Start the node and wait until the cluster lists it alive."""
        return self.launch().wait_joined(timeout_s)

    def launch(self) -> ExtraNode:
        """Run ``ray start`` for this node and return at once (``wait_joined`` waits for it)."""
        import ray

        ray_cli = Path(sys.executable).with_name("ray")
        # A temp dir of its own (short: Ray's unix sockets live under it). Sharing the head's would
        # make this node's log monitor replay every earlier worker's output into the notebook, and
        # `ray start` would record this cluster as the machine's default one for any later ray.init().
        self.temp_dir = Path(tempfile.mkdtemp(prefix="rx-", dir="/tmp"))
        self.log = self.temp_dir / "ray-start.log"
        self._ports = {flag: free_port() for flag in _NODE_PORT_FLAGS}
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
                *(f"--{flag}={port}" for flag, port in self._ports.items()),
            ],
            stdout=fd,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: stop() ends exactly this node
            # A loaded machine starts the node's agents slowly: give them longer than the default.
            env={**os.environ, "RAY_ADDRESS": "", "RAY_agent_register_timeout_ms": "120000"},
        )
        os.close(fd)  # the node writes to its own copy of the descriptor
        return self

    def _joined(self) -> dict[str, Any] | None:
        """This node's entry in ``ray.nodes()`` once it is alive (several nodes may be joining at
        once): the one whose raylet socket lives under this node's temp dir, or that exports its
        metrics on the port this node was given."""
        import ray

        mine, metrics = str(self.temp_dir) + os.sep, self._ports["metrics-export-port"]
        for n in ray.nodes():
            socket_here = str(n.get("RayletSocketName", "")).startswith(mine)
            if n["Alive"] and (socket_here or n.get("MetricsExportPort") == metrics):
                return n
        return None

    def wait_joined(self, timeout_s: float = 120.0, quiet: bool = False) -> ExtraNode:
        """Wait until the cluster lists this (launched) node alive; stop it and raise if it does not."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            joined = self._joined()
            if joined:
                self.node_id, self.joined_at, self.joined_time = (
                    joined["NodeID"],
                    time.monotonic(),
                    time.time(),
                )
                if not quiet:
                    self.say_joined()
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

    def say_joined(self) -> None:
        print(f"[driver] node {self.node_id[:12]} joined with {self.resources or {}} ", flush=True)

    def wait_joined_in_background(self, timeout_s: float = 120.0) -> ExtraNode:
        """``wait_joined`` in a daemon thread (it records ``joined_at`` or ``error``); ``joined`` waits for it."""

        def wait() -> None:
            try:
                self.wait_joined(timeout_s, quiet=True)
            except Exception as exc:  # kept for joined(), which raises it or turns it into a reason
                self.error = exc

        self._joiner = threading.Thread(target=wait, name="extra-node-join", daemon=True)
        self._joiner.start()
        return self

    def start_when(
        self, condition, poll_s: float = 0.5, timeout_s: float = 600.0, then: Callable[[], Any] | None = None
    ) -> None:
        """Start from a daemon thread once ``condition()`` is true (a node joining mid-run); once it
        joined, call ``then()`` (e.g. ``refresh_autoscaling_coordinator``)."""
        self._when(condition, self.start, poll_s, timeout_s, then)

    def stop_when(
        self,
        condition,
        poll_s: float = 0.5,
        timeout_s: float = 600.0,
        graceful: bool = False,
        then: Callable[[], Any] | None = None,
    ) -> None:
        """Stop from a daemon thread once ``condition()`` is true (a node lost mid-run); with ``then``,
        wait until the cluster lists the node dead (``wait_gone``), then call ``then()``."""

        def stop() -> None:
            # With ``then``, watch for the node's death from before the signal: the cluster may list
            # it dead well before its `ray start` process has ended.
            watcher = threading.Thread(target=self.wait_gone, daemon=True) if then is not None else None
            if watcher is not None:
                watcher.start()
            self.stop(graceful=graceful)
            if watcher is not None:
                watcher.join(60)

        self._when(condition, stop, poll_s, timeout_s, then)

    def _when(self, condition, action, poll_s: float, timeout_s: float, then=None) -> None:
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
                if then is not None:
                    then()
            except Exception as exc:  # a thread must not fail silently: keep it for the caller
                self.error = exc
                print(f"[driver] extra node: stopping or starting failed: {exc}", flush=True)

        threading.Thread(target=wait, name="extra-node", daemon=True).start()

    def wait_gone(self, timeout_s: float = 60.0) -> bool:
        """Wait until the cluster lists this (stopped) node dead; record ``gone_time``. False on timeout.

        A node shut down with SIGTERM tells the head at once; one SIGKILLed is declared dead only
        after its health checks fail (≈ 15 s here)."""
        import ray

        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not any(n["NodeID"] == self.node_id and n["Alive"] for n in ray.nodes()):
                self.gone_time = time.time()
                return True
            time.sleep(0.2)
        return False

    def stop(self, graceful: bool = False) -> None:
        """End the node (idempotent). By default abruptly, like a machine losing power: SIGKILL
        its process group; the head notices only when its health checks fail (≈ 15 s here).
        ``graceful=True``: SIGTERM, like a machine being shut down or a cloud VM reclaimed; the
        raylet tells the head it is leaving, so the cluster knows at once. Whatever is still
        running after that gets SIGKILL."""
        if self.process is not None and self.process.poll() is None:
            self.stop_sent_at = time.time()
            try:
                if graceful:
                    os.killpg(self.process.pid, signal.SIGTERM)
                    try:
                        self.process.wait(timeout=15)
                    except subprocess.TimeoutExpired:
                        pass
                os.killpg(self.process.pid, signal.SIGKILL)  # the rest of the group, if any
            except ProcessLookupError:
                pass
            self.process.wait(timeout=30)
            self.stopped_at = time.time()
            how = "shut down (SIGTERM)" if graceful else "killed (SIGKILL)"
            node = f" {self.node_id[:12]}" if self.node_id else ""
            print(
                f"[driver] extra node{node} {how}: its processes, and any worker on it, are gone", flush=True
            )
        if self.node_id and self.temp_dir is not None:  # it joined: nothing in its start-up output to read
            shutil.rmtree(self.temp_dir, ignore_errors=True)


def _is_this_machine(host: str) -> bool:
    """True when ``host`` is an address of this machine (a socket can bind to it here)."""
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
    count: int, num_cpus: int = 1, resources: dict[str, float] | None = None, wait: bool = True
) -> tuple[list[ExtraNode], str | None]:
    """Start ``count`` ``ExtraNode``s and return ``(nodes, None)``, or ``([], why not)`` in one line.

    On a local Ray a node that fails to join raises (a bug to see). On a cluster we connected to,
    the reason is returned instead (``extra_node_blocker``, or the node's own error), so the
    section that needs the nodes can say in one line why it is skipped there. All nodes start at
    once (each ``ray start`` mostly waits for its own processes), then each is waited for.
    ``wait=False`` returns as soon as they are launched and waits in the background: call
    ``joined(nodes)`` before using them.
    """
    reason = extra_node_blocker()
    if reason:
        return [], reason
    nodes = [ExtraNode(num_cpus=num_cpus, resources=resources) for _ in range(count)]
    launched: list[ExtraNode] = []
    try:
        for node in nodes:
            launched.append(node.launch())
    except Exception:
        for node in launched:
            node.stop()
        raise
    if not wait:
        for node in nodes:
            node.wait_joined_in_background()
        return nodes, None
    reason = joined(nodes)
    return ([], reason) if reason else (nodes, None)


def joined(nodes: list[ExtraNode], timeout_s: float = 120.0) -> str | None:
    """Wait until every one of ``nodes`` (from ``add_local_nodes``) joined; say so, return None.

    If one did not: all are stopped, and on a local Ray its error is raised; on a cluster we
    connected to the reason comes back in one line instead.
    """
    import ray

    for node in nodes:
        if node._joiner is not None:
            node._joiner.join(timeout_s)
        elif node.node_id is None and node.error is None:
            try:
                node.wait_joined(timeout_s, quiet=True)
            except RuntimeError as exc:
                node.error = exc
    failed = [node for node in nodes if node.error is not None or node.node_id is None]
    if not failed:
        for node in nodes:
            node.say_joined()
        return None
    for node in nodes:
        node.stop()
    err = failed[0].error or RuntimeError(
        f"The extra Ray node did not join the cluster within {timeout_s:.0f} s."
    )
    if not os.environ.get("RAY_ADDRESS"):
        raise err
    address = ray.get_runtime_context().gcs_address
    return f"a Ray node started on this machine could not join the cluster at {address}: {err}"


# Ray's autoscaling coordinator: a detached actor that the first elastic run on a cluster creates. An
# elastic run sizes its worker group from the nodes the coordinator last read, and it re-reads them
# only every COORDINATOR_REFRESH_S (a constant of Ray's: no setting, env or config changes it).
# Name, namespace, period and the refresh call are Ray internals (course_utils.rayinternals).
COORDINATOR_NAME = rayinternals.AUTOSCALING_COORDINATOR_NAME
COORDINATOR_NAMESPACE = rayinternals.AUTOSCALING_COORDINATOR_NAMESPACE
COORDINATOR_REFRESH_S = rayinternals.AUTOSCALING_COORDINATOR_REFRESH_S


def refresh_autoscaling_coordinator(timeout_s: float = 10.0) -> bool:
    """Make Ray's autoscaling coordinator re-read the cluster's nodes now; True if it did.

    Why: a node that joins or leaves changes what an elastic run may use only at the coordinator's
    next refresh, up to ``COORDINATOR_REFRESH_S`` (20 s) later. The demo calls this right after a
    node registered or left, so it waits for the controller's own decision instead of that clock.
    It runs the coordinator's periodic refresh once (``rayinternals.tick_autoscaling_coordinator``).
    False when there is no coordinator yet (the first elastic run creates it, reading the nodes
    then) or a Ray version without that refresh: the run then waits for the next refresh, as it
    would without this call.
    """
    import ray

    try:
        coordinator = ray.get_actor(COORDINATOR_NAME, namespace=COORDINATOR_NAMESPACE)
        rayinternals.tick_autoscaling_coordinator(coordinator, timeout_s)
    except Exception:  # no coordinator, or no such refresh in this Ray: the 20 s refresh still happens
        return False
    return True


def _decision(message: str) -> tuple[str, int] | None:
    """``("start", n)`` / ``("resize", n)`` from one of the elastic policy's INFO lines, else None."""
    import re

    if rayinternals.ELASTIC_START_DECISION in message:
        found = re.search(r"resources for (\d+) workers", message)
        return ("start", int(found.group(1))) if found else None
    if rayinternals.ELASTIC_RESIZE_DECISION in message:
        found = re.search(r"from (\d+) -> (\d+) workers", message)
        return ("resize", int(found.group(2))) if found else None
    return None


def scaling_decisions(
    run_name: str, since: float = 0.0, log_dir: str | Path | None = None
) -> list[dict[str, Any]]:
    """The elastic controller's decisions for run ``run_name``, oldest first: dicts with ``time``
    (wall clock, s), ``kind`` (``"start"``: (re)start a stopped group with ``workers``;
    ``"resize"``: a healthy group is resized to ``workers``) and Ray's own ``message``.

    Read from the controller's system log (``<session>/logs/train/ray-train-sys-controller-*.log``,
    one JSON record a line, with ``run_name`` and ``timestamp_ns``) on this machine: the head's
    session when the driver runs there. ``since`` (wall clock) leaves out an earlier run of the same
    name in this session; ``log_dir`` overrides where to look (tests). Empty if none.
    """
    if log_dir is None:
        from course_utils.logs import session_logs_dir

        logs = session_logs_dir()
        if logs is None:
            return []
        log_dir = logs / "train"
    found = []
    for path in sorted(Path(log_dir).glob("ray-train-sys-controller-*.log")):
        for line in path.read_text(errors="replace").splitlines():
            if "Deciding to" not in line:
                continue
            try:
                record = json.loads(line)
            except ValueError:  # a line being written
                continue
            decision = _decision(record.get("message", ""))
            if record.get("run_name") == run_name and decision and record["timestamp_ns"] / 1e9 >= since:
                found.append(
                    {
                        "time": record["timestamp_ns"] / 1e9,
                        "kind": decision[0],
                        "workers": decision[1],
                        "message": record["message"],
                    }
                )
    return sorted(found, key=lambda d: d["time"])
