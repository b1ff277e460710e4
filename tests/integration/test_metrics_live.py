"""course_utils.metrics against a live Ray: the local Ray the lessons start (a short fit sampled,
Ray Train's metrics included) and a two-node cluster started with `ray start`, joined through
RAY_ADDRESS from a separate driver, where every node's endpoint is found and sampled."""

from __future__ import annotations

import os
import textwrap

import pytest

from course_utils import config, metrics, plots, training
from maintainer_tools.cluster import LocalCluster, NodeSpec, node_ip
from tests.integration.drivers import run_driver
from tests.notebook_runs import CLUSTER

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
    trainer = training.make_trainer("metrics-live", tiny, num_workers=2)
    with metrics.sample_metrics(run_name="metrics-live", required=True) as samples:
        result = trainer.fit()
    frame, marks = samples.frame, metrics.report_times(result)
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


DRIVER = textwrap.dedent(
    """
    import json, time
    from course_utils import metrics, session
    from maintainer_tools import cluster

    session.start_ray(verbose=False)
    cluster.wait_for_nodes(2)
    found = metrics.wait_until_ready(timeout_s=120)
    with metrics.sample_metrics(every_s=0.5, required=True) as samples:
        time.sleep(3)
    frame = samples.frame
    print("RESULT " + json.dumps({
        "urls": [e.url for e in found],
        "cpu_nodes": sorted(set(frame["node"][frame["metric"] == "cpu %"])),
        "times": int(frame["time"].nunique()),
        "errors": samples.errors,
    }))
    """
)


@pytest.mark.path(CLUSTER)
def test_every_node_of_a_ray_start_cluster_is_sampled(tmp_path, mnist_root):
    with LocalCluster(NodeSpec(num_cpus=1), [NodeSpec(num_cpus=1, resources={"node2": 1})]) as cluster:
        out = run_driver(cluster, DRIVER, storage=tmp_path / "storage", data=mnist_root, timeout_s=600)
    assert len(out["urls"]) == 2 and {u.split("//")[1].split(":")[0] for u in out["urls"]} == {
        node_ip(0),
        node_ip(1),
    }
    assert len(out["cpu_nodes"]) == 2, "both nodes' CPU figures were sampled"
    assert out["times"] >= 3 and not out["errors"]
