"""Lesson 04's extra Ray nodes on a cluster the learner did not start: added when the head runs on
this machine, else a one-line reason (never a traceback); and the SIGKILL demo never kills a
process that is not a Ray Train worker on this machine. Ray itself is patched: no cluster here."""

import os
import shutil
import subprocess
import sys
from types import SimpleNamespace

import pytest
import ray

from course_utils.lesson04 import elastic, faults
from maintainer_tools.harness.notebook_runs import CLUSTER as CLUSTER_PATH


@pytest.fixture
def cluster_at(monkeypatch):
    def set_(address: str | None) -> None:
        if address is None:
            monkeypatch.delenv("RAY_ADDRESS", raising=False)
            address = "127.0.0.1:6379"
        else:
            monkeypatch.setenv("RAY_ADDRESS", address)
        monkeypatch.setattr(ray, "get_runtime_context", lambda: SimpleNamespace(gcs_address=address))

    return set_


def test_a_local_ray_can_always_take_a_node(cluster_at):
    cluster_at(None)
    assert elastic.extra_node_blocker() is None


@pytest.mark.path(CLUSTER_PATH)
@pytest.mark.parametrize("host", ["127.0.0.2", "localhost"])
def test_a_connected_cluster_whose_head_runs_here_can_take_one(cluster_at, host):
    cluster_at(f"{host}:6379")
    assert elastic.extra_node_blocker() is None


@pytest.mark.path(CLUSTER_PATH)
def test_a_remote_cluster_is_skipped_in_one_line(cluster_at, monkeypatch):
    cluster_at("192.0.2.77:6379")  # TEST-NET-1: never an address of this machine
    started = []
    monkeypatch.setattr(elastic.ExtraNode, "launch", lambda self: started.append(self) or self)
    nodes, reason = elastic.add_local_nodes(2, resources={"slot": 1})
    assert nodes == [] and not started, "nothing is started for a cluster on other machines"
    assert reason.startswith("the cluster at 192.0.2.77:6379 runs on other machines") and "\n" not in reason


@pytest.mark.path(CLUSTER_PATH)
def test_a_node_that_cannot_join_a_connected_cluster_is_a_reason_not_a_traceback(cluster_at, monkeypatch):
    cluster_at("127.0.0.2:6379")
    launched, waited, stopped = [], [], []

    def wait_joined(self, timeout_s=120.0, quiet=False):
        waited.append(self)
        if len(waited) == 2:
            raise RuntimeError("The extra Ray node did not join the cluster within 120 s: version mismatch")
        self.node_id = f"node-{len(waited)}"
        return self

    monkeypatch.setattr(elastic.ExtraNode, "launch", lambda self: launched.append(self) or self)
    monkeypatch.setattr(elastic.ExtraNode, "wait_joined", wait_joined)
    monkeypatch.setattr(elastic.ExtraNode, "stop", lambda self, graceful=False: stopped.append(self))
    nodes, reason = elastic.add_local_nodes(2, resources={"slot": 1})
    assert len(launched) == 2 and waited == launched, "both start at once, then each is waited for"
    assert nodes == [] and stopped == launched, "the node that did join is stopped again"
    assert "could not join the cluster at 127.0.0.2:6379" in reason and "version mismatch" in reason


def test_locally_a_node_that_cannot_join_raises(cluster_at, monkeypatch):
    cluster_at(None)

    def wait_joined(self, timeout_s=120.0, quiet=False):
        raise RuntimeError("did not join")

    monkeypatch.setattr(elastic.ExtraNode, "launch", lambda self: self)
    monkeypatch.setattr(elastic.ExtraNode, "wait_joined", wait_joined)
    monkeypatch.setattr(elastic.ExtraNode, "stop", lambda self, graceful=False: None)
    with pytest.raises(RuntimeError, match="did not join"):
        elastic.add_local_nodes(1)


def test_extra_nodes_advertise_no_gpus_and_start_with_the_requested_resources(cluster_at, monkeypatch):
    cluster_at(None)
    node = elastic.ExtraNode(num_cpus=1, resources={"slot": 1})
    assert (node.num_cpus, node.num_gpus, node.resources) == (1, 0, {"slot": 1})
    commands = []

    class FakePopen:
        pid = -1

        def __init__(self, command, **kwargs):
            commands.append(command)
            os.write(kwargs["stdout"], b"ray start: could not connect to GCS\n")

        def poll(self):
            return 1  # exited at once

    monkeypatch.setattr(subprocess, "Popen", FakePopen)
    monkeypatch.setattr(ray, "nodes", lambda: [])
    with pytest.raises(RuntimeError, match="could not connect to GCS") as err:
        node.start(timeout_s=5)
    assert "--num-gpus=0" in commands[0] and '--resources={"slot": 1}' in commands[0]
    assert f"--temp-dir={node.temp_dir}" in commands[0], "a temp dir of its own, not the head's"
    assert node.log.parent == node.temp_dir and str(node.log) in str(err.value), "the error names its output"
    shutil.rmtree(node.temp_dir)


def test_external_killer_never_kills_a_process_that_is_not_a_train_worker(tmp_path, monkeypatch):
    spec = faults.crash_once(tmp_path / "kill", how="external")
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (tmp_path / "kill").write_text(f"{other.pid}\n")
        # The state API lists that pid as a worker (a pid that names another process here).
        monkeypatch.setattr(faults, "train_worker_pids", lambda: {other.pid: ("actor-elsewhere", None)})
        killer = faults.ExternalKiller(spec, timeout_s=5, poll_s=0.05).start()
        with pytest.raises(RuntimeError, match="not a Ray Train worker process on this machine"):
            killer.join(10)
        assert other.poll() is None and not killer.fired, "the unrelated process is still alive"
    finally:
        other.kill()
        other.wait()


def test_a_node_is_recognised_by_its_own_socket_or_metrics_port(tmp_path, monkeypatch):
    """Several nodes join at once: each finds its own entry in ray.nodes(), not just any new one."""
    node = elastic.ExtraNode()
    node.temp_dir, node._ports = tmp_path / "rx-a", {"metrics-export-port": 40001}
    others = {
        "NodeID": "b",
        "Alive": True,
        "RayletSocketName": "/tmp/rx-b/s/raylet",
        "MetricsExportPort": 40002,
    }
    mine = {
        "NodeID": "a",
        "Alive": True,
        "RayletSocketName": f"{node.temp_dir}/s/raylet",
        "MetricsExportPort": 1,
    }
    monkeypatch.setattr(ray, "nodes", lambda: [others])
    assert node._joined() is None
    monkeypatch.setattr(ray, "nodes", lambda: [others, mine])
    assert node._joined()["NodeID"] == "a"
    by_port = {"NodeID": "c", "Alive": True, "MetricsExportPort": 40001}
    monkeypatch.setattr(ray, "nodes", lambda: [others, by_port])
    assert node._joined()["NodeID"] == "c"


@pytest.mark.parametrize("graceful", [False, True])
def test_stop_ends_the_whole_process_group(graceful):
    """stop() ends the node's own process group: SIGKILL, or SIGTERM first when graceful."""
    process = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); time.sleep(60)",
        ],
        start_new_session=True,
    )
    node = elastic.ExtraNode()
    node.process = process
    node.stop(graceful=graceful)
    assert process.poll() is not None and node.stop_sent_at <= node.stopped_at
    with pytest.raises(ProcessLookupError):
        os.killpg(process.pid, 0)  # nothing of the group is left


@pytest.mark.parametrize("connected", [False, True])
def test_nodes_started_in_the_background_are_waited_for_by_joined(cluster_at, monkeypatch, capsys, connected):
    """wait=False returns at once; joined() waits, says which joined, and fails like wait=True would."""
    cluster_at("127.0.0.2:6379" if connected else None)
    monkeypatch.setattr(elastic.ExtraNode, "launch", lambda self: self)
    stopped = []
    monkeypatch.setattr(elastic.ExtraNode, "stop", lambda self, graceful=False: stopped.append(self))

    def wait_joined(self, timeout_s=120.0, quiet=False):
        self.node_id = f"id-{id(self)}"
        return self

    monkeypatch.setattr(elastic.ExtraNode, "wait_joined", wait_joined)
    nodes, reason = elastic.add_local_nodes(2, resources={"slot": 1}, wait=False)
    assert len(nodes) == 2 and reason is None
    assert elastic.joined(nodes) is None and capsys.readouterr().out.count("joined with") == 2

    def fails(self, timeout_s=120.0, quiet=False):
        raise RuntimeError("The extra Ray node did not join the cluster: version mismatch")

    monkeypatch.setattr(elastic.ExtraNode, "wait_joined", fails)
    nodes, _ = elastic.add_local_nodes(2, resources={"slot": 1}, wait=False)
    if connected:
        assert "could not join the cluster at 127.0.0.2:6379" in elastic.joined(nodes)
    else:
        with pytest.raises(RuntimeError, match="version mismatch"):
            elastic.joined(nodes)
    assert stopped == nodes, "a failed start stops every node it started"
