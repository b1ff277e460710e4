"""Lesson 04's extra Ray nodes, and reading what an elastic run decided.

``ExtraNode`` / ``add_local_nodes`` start one more Ray node on this machine (``ray start --block``
in its own process group, which ``stop()`` kills and nothing else) and join it to this process's
Ray; ``extra_node_blocker`` says in one line why a cluster on other machines gets none.
``scaling_decisions`` reads what an elastic run's controller decided, and
``refresh_autoscaling_coordinator`` makes Ray re-read the nodes. ``maintainer_tools.cluster`` (the
tests' multi-node cluster) takes ``free_port`` and ``NODE_PORT_FLAGS`` from here.
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
from pathlib import Path
from typing import Any

from course_utils.internals import rayinternals
from course_utils.internals.logs import session_logs_dir

# How often wait_joined asks the cluster whether a launched node is in (a GCS call each time).
JOIN_POLL_S = 0.1
# Ports a node takes at a fixed default unless told (e.g. the dashboard agent's 52365), which the head
# on the same machine already has: a second node on this machine is given free ones.
NODE_PORT_FLAGS = (
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
    """A second Ray node on this machine, to show elastic training: Ray Train sizes an elastic worker
    group from the nodes' *total* resources, so holding CPUs with an actor does not shrink it, but a
    node joining (or leaving) does. A local Ray, or a cluster whose head runs here. No GPUs by
    default: it shares this machine's with the head, and counting them twice would put two ranks
    on one GPU.
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
        self.launched_time: float | None = None  # wall clock when `ray start` ran for it
        # Wall clock (Ray's logs use it) of the driver's last look that did not list it yet: it registered
        # after this, within one look (JOIN_POLL_S). The moment a look saw it can be later than a decision
        # Ray's controller took on it, because the controller may see the node first.
        self.joined_time: float | None = None
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
        self.launched_time = time.time()
        self.log = self.temp_dir / "ray-start.log"
        self._ports = {flag: free_port() for flag in NODE_PORT_FLAGS}
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
        not_yet = self.launched_time if self.launched_time is not None else time.time()
        while time.monotonic() < deadline:
            looked = time.time()
            joined = self._joined()
            if joined:
                self.node_id, self.joined_time = joined["NodeID"], not_yet
                if not quiet:
                    self.say_joined()
                return self
            if self.process.poll() is not None:
                break
            not_yet = looked
            time.sleep(JOIN_POLL_S)
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
        """``wait_joined`` in a daemon thread (it records ``node_id`` or ``error``); see ``joined``."""

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
        """Wait until the cluster lists this (stopped) node dead; record ``gone_time``. False on timeout."""
        import ray

        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not any(n["NodeID"] == self.node_id and n["Alive"] for n in ray.nodes()):
                self.gone_time = time.time()
                return True
            time.sleep(0.2)
        return False

    def stop(self, graceful: bool = False) -> None:
        """End the node (idempotent). By default SIGKILL its process group, like a machine losing power:
        the head notices only when its health checks fail (≈ 15 s here). ``graceful=True``: SIGTERM,
        like a shutdown or a reclaimed cloud VM; the raylet tells the head at once. What still runs
        then gets SIGKILL."""
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

    A local Ray always can; a cluster we connected to only when its head runs here. Elsewhere, this
    machine as a node would take other people's work, and killing it would not be a node of that
    cluster leaving.
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

    On a local Ray a node that fails to join raises (a bug to see); on a cluster we connected to the
    reason is returned, so the section can say why it is skipped. All nodes start at once.
    ``wait=False`` returns once they are launched: call ``joined(nodes)`` before using them.
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
    """Wait until every one of ``nodes`` (from ``add_local_nodes``) joined; say so, return None. If one
    did not, all are stopped and its error raised (local Ray) or returned in one line (a cluster)."""
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


def refresh_autoscaling_coordinator(timeout_s: float = 10.0) -> bool:
    """Make Ray's autoscaling coordinator re-read the cluster's nodes now; True if it did.

    Why: an elastic run sizes its worker group from the nodes the coordinator (a detached actor the
    first elastic run creates) last read, and it re-reads them only every
    ``rayinternals.AUTOSCALING_COORDINATOR_REFRESH_S`` (20 s, no setting changes it). Called right
    after a node joined or left, the demo waits for the controller's decision, not that clock.
    False when there is no coordinator yet or no such refresh in this Ray: the next refresh comes.
    """
    import ray

    try:
        coordinator = ray.get_actor(
            rayinternals.AUTOSCALING_COORDINATOR_NAME,
            namespace=rayinternals.AUTOSCALING_COORDINATOR_NAMESPACE,
        )
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

    Read from the controller's JSON system log on this machine
    (``<session>/logs/train/ray-train-sys-controller-*.log``). ``since`` (wall clock) leaves out an
    earlier run of the same name; ``log_dir`` overrides where to look (tests).
    """
    if log_dir is None:
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
