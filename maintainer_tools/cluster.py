"""The multi-node test cluster: a real Ray cluster on one machine, for the tests and the benches.

``LocalCluster`` runs ``ray start --head`` and one ``ray start --address=...`` per extra node,
each ``--block``-ing in its own process group, with its own ``--temp-dir``, loopback address
(``127.0.0.2``, ``127.0.0.3``, ...) and free ports, so it never collides with a Ray that a notebook (or another user) runs on the machine.
``stop()`` ends exactly those process groups and nothing else: never ``ray stop``, which stops
every Ray on the machine.

Connect a course process to it with ``cluster.driver_env()`` (``RAY_ADDRESS=<cluster.address>``
and ``RAY_AUTH_MODE=token``): ``session.start_ray()`` then joins the cluster instead of starting
Ray. Every node here sees the same disk, so a local ``COURSE_STORAGE`` folder counts as shared
storage; on real machines it would not. (Lesson 04's one extra node is ``course_utils.lesson04.elastic``.)

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
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from course_utils.core import session
from course_utils.lesson04.elastic import NODE_PORT_FLAGS, free_port


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
            *(f"--{flag}={free_port()}" for flag in NODE_PORT_FLAGS),
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
            # A disk over Ray's 95% (a shared CI machine's) would put an error line into every cell.
            **session.disk_guard(temp_dir)[0],
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
    from course_utils.internals.dashboard import auth_token

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
