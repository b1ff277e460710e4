"""course_utils.internals.metrics against a live Ray: the local Ray the lessons start (every node's endpoint, a
short fit sampled with Ray Train's metrics included). Every node of a cluster started with `ray start`
is the hosts tier's: lesson 02's utilization there must read all three hosts."""

from __future__ import annotations

import os

import pytest

from course_utils.core import config, history, plots, training
from course_utils.core.storage import resolve as resolve_storage
from course_utils.internals import metrics
from course_utils.lesson_code import train_loop_per_worker

pytestmark = pytest.mark.integration


def test_every_alive_node_serves_its_metrics(ray_session):
    import ray

    found = metrics.wait_until_ready(timeout_s=60)
    alive = [n for n in ray.nodes() if n["Alive"]]
    assert {e.node_id for e in found} == {n["NodeID"] for n in alive}
    rows = metrics.parse(metrics.fetch(found[0]), found[0].node, 0.0)
    values = {r["metric"]: r["value"] for r in rows}
    assert 0.0 <= values["cpu %"] <= 100.0
    assert 0.0 < values["memory used GB"] <= values["memory total GB"]
    assert values["object store used MB"] >= 0.0


def test_a_fit_is_sampled_with_ray_train_metrics(ray_session, storage):
    assert os.environ.get("RAY_TRAIN_METRICS_ENABLED", "1") != "0", "the course keeps Ray Train's metrics on"
    tiny = config.SMOKE.with_(epochs=2, train_size=512, test_size=200, batch_size=64)
    trainer = training.make_trainer(
        "metrics-live", tiny, num_workers=2, store=resolve_storage(), train_loop=train_loop_per_worker
    )
    with metrics.sample_metrics(run_name="metrics-live", required=True) as samples:
        result = trainer.fit()
    frame, marks = samples.frame, history.report_times(result)
    assert list(marks["epoch"]) == [0, 1]
    during = frame[frame["time"] <= marks["reported_at"].max()]
    assert during["time"].nunique() >= 5, "sampled about once a second while the fit ran"
    assert {"cpu %", "memory used GB", "object store used MB"} <= set(during["metric"])
    train = set(frame["metric"][frame["metric"].str.startswith("ray_train_")])
    # Ray Train's controller exports its state from the start. Every other series is recorded once (the
    # group's start time) or at each report (the ranks' report times) and reaches the endpoint at the process's
    # next export: a short fit can end before one of them is exported (CI once missed the start time while both
    # ranks' report times were there), so the test asks for at least one of them.
    assert any(m.startswith("ray_train_controller_state[") for m in train), train
    recorded_later = {m for m in train if "[rank " in m or m == "ray_train_worker_group_start_total_time_s"}
    assert recorded_later, train
    assert not samples.errors, samples.errors[:3]
    fig = plots.utilization(frame, marks)
    assert [t.get_text() for t in fig.axes[0].texts] == ["epoch 0", "epoch 1"]
