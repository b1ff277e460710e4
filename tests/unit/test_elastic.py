"""Lesson 04's elastic demo, without Ray: reading the controller's resize decisions from its log
(records as Ray 2.58 writes them), refreshing the autoscaling coordinator, and an extra node that
starts or stops on a condition and only then calls ``then``."""

import json
import threading
import time
from types import SimpleNamespace

import pytest
import ray

from course_utils.lesson04 import elastic

# Recorded from lesson 04's elastic run (ray-train-sys-controller-*.log), trimmed to the fields used.
RECORDED = [
    {
        "levelname": "INFO",
        "message": "Detected ready resources for 1 workers in the cluster. "
        "Deciding to start/restart training with this worker group size.",
        "run_name": "lesson04-elastic",
        "timestamp_ns": 1795381169053218466,
    },
    {
        "levelname": "DEBUG",
        "message": "Skipping resize decision due to the latest resizing consideration happening too "
        "recently: 0.51 seconds < ScalingConfig(elastic_resize_monitor_interval_s=1.00 seconds).",
        "run_name": "lesson04-elastic",
        "timestamp_ns": 1795381170053218466,
    },
    {
        "levelname": "INFO",
        "message": "Detected changes in the cluster resources. "
        "Deciding to resize the worker group from 1 -> 2 workers.",
        "run_name": "lesson04-elastic",
        "timestamp_ns": 1795381189553218466,
    },
    {
        "levelname": "INFO",
        "message": "Detected ready resources for 2 workers in the cluster. "
        "Deciding to start/restart training with this worker group size.",
        "run_name": "another-run",
        "timestamp_ns": 1795381190053218466,
    },
    {
        "levelname": "INFO",
        "message": "Detected ready resources for 1 workers in the cluster. "
        "Deciding to start/restart training with this worker group size.",
        "run_name": "lesson04-elastic",
        "timestamp_ns": 1795381210053218466,
    },
]


def write_log(tmp_path, records, partial=False):
    text = "\n".join(json.dumps(r) for r in records) + "\n"
    if partial:
        text += '{"message": "Deciding to resize the worker gro'  # a line still being written
    (tmp_path / "ray-train-sys-controller-abc.log").write_text(text)
    (tmp_path / "ray-train-app-controller-abc.log").write_text(text)  # the app log repeats INFO: not read


def test_decisions_are_read_for_one_run_in_order(tmp_path):
    write_log(tmp_path, list(reversed(RECORDED)), partial=True)
    decisions = elastic.scaling_decisions("lesson04-elastic", log_dir=tmp_path)
    assert [(d["kind"], d["workers"]) for d in decisions] == [("start", 1), ("resize", 2), ("start", 1)]
    assert decisions[1]["time"] == pytest.approx(1795381189.553218466)
    assert decisions[1]["message"].endswith("from 1 -> 2 workers.")


def test_decisions_before_since_belong_to_an_earlier_run_of_the_same_name(tmp_path):
    write_log(tmp_path, RECORDED)
    later = elastic.scaling_decisions("lesson04-elastic", since=1795381200.0, log_dir=tmp_path)
    assert [(d["kind"], d["workers"]) for d in later] == [("start", 1)]
    assert elastic.scaling_decisions("never-ran", log_dir=tmp_path) == []
    assert elastic.scaling_decisions("lesson04-elastic", log_dir=tmp_path / "missing") == []


def test_refresh_runs_the_coordinators_own_refresh_once(monkeypatch):
    calls = []
    coordinator = SimpleNamespace(_tick=SimpleNamespace(remote=lambda: calls.append("tick") or "ref"))
    monkeypatch.setattr(ray, "get_actor", lambda name, namespace: coordinator)
    monkeypatch.setattr(ray, "get", lambda ref, timeout: None)
    assert elastic.refresh_autoscaling_coordinator() is True and calls == ["tick"]


def test_refresh_without_a_coordinator_says_so_and_does_not_raise(monkeypatch):
    def no_actor(name, namespace):
        assert (name, namespace) == ("AutoscalingCoordinator", "AutoscalingCoordinator")
        raise ValueError("Failed to look up actor 'AutoscalingCoordinator'")

    monkeypatch.setattr(ray, "get_actor", no_actor)
    assert elastic.refresh_autoscaling_coordinator() is False


def test_wait_gone_records_when_the_cluster_lists_the_node_dead(monkeypatch):
    node = elastic.ExtraNode()
    node.node_id = "n1"
    answers = iter([[{"NodeID": "n1", "Alive": True}], [{"NodeID": "n1", "Alive": False}]])
    monkeypatch.setattr(ray, "nodes", lambda: next(answers))
    before = time.time()
    assert node.wait_gone(timeout_s=5) is True and node.gone_time >= before
    still = elastic.ExtraNode()
    still.node_id = "n2"
    monkeypatch.setattr(ray, "nodes", lambda: [{"NodeID": "n2", "Alive": True}])
    assert still.wait_gone(timeout_s=0.3) is False and still.gone_time is None


def test_start_when_calls_then_only_after_the_node_joined(monkeypatch):
    node, order, done = elastic.ExtraNode(), [], threading.Event()
    go = threading.Event()
    monkeypatch.setattr(elastic.ExtraNode, "start", lambda self, timeout_s=120.0: order.append("joined"))
    node.start_when(go.is_set, poll_s=0.01, then=lambda: order.append("then") or done.set())
    time.sleep(0.1)
    assert order == [], "nothing happens before the condition holds"
    go.set()
    assert done.wait(5) and order == ["joined", "then"]


def test_stop_when_watches_from_before_the_signal_and_calls_then_once_the_node_is_dead(monkeypatch):
    """The cluster may list the node dead before its `ray start` has ended: the watch starts first."""
    node, order, done, stopped = elastic.ExtraNode(), [], threading.Event(), threading.Event()

    def stop(self, graceful=False):
        order.append(("stop", graceful))
        stopped.set()

    def wait_gone(self, timeout_s=60.0):
        order.append("watching")
        stopped.wait(5)
        order.append("gone")

    monkeypatch.setattr(elastic.ExtraNode, "stop", stop)
    monkeypatch.setattr(elastic.ExtraNode, "wait_gone", wait_gone)
    node.stop_when(lambda: True, poll_s=0.01, graceful=True, then=lambda: order.append("then") or done.set())
    assert done.wait(5) and order == ["watching", ("stop", True), "gone", "then"]


def test_a_failing_then_is_kept_for_the_caller(monkeypatch, capsys):
    node, done = elastic.ExtraNode(), threading.Event()
    monkeypatch.setattr(elastic.ExtraNode, "start", lambda self, timeout_s=120.0: None)

    def boom():
        done.set()
        raise RuntimeError("no coordinator")

    node.start_when(lambda: True, poll_s=0.01, then=boom)
    assert done.wait(5)
    for _ in range(100):
        if node.error is not None:
            break
        time.sleep(0.01)
    assert isinstance(node.error, RuntimeError) and "no coordinator" in capsys.readouterr().out
