"""The course against an existing two-node Ray cluster: a head and a second node with its own
resources (both on this machine, own ports and temp dir), joined through RAY_ADDRESS from a
separate driver process, with one training worker on each node and storage both can see."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from course_utils.cluster import LocalCluster, NodeSpec, node_ip
from course_utils.config import REPO_ROOT
from tests.integration.drivers import run_driver
from tests.notebook_runs import CLUSTER

pytestmark = [pytest.mark.integration, pytest.mark.path(CLUSTER)]

DRIVER = textwrap.dedent(
    """
    import json, sys
    from course_utils import cluster, config, session, training
    from course_utils.history import metric_history

    info = session.start_ray(verbose=True)
    nodes = cluster.wait_for_nodes(2)
    tiny = config.SMOKE.with_(epochs=2, train_size=512, test_size=200, batch_size=64)
    result = training.make_trainer(
        "two-nodes", tiny, num_workers=2, placement_strategy="SPREAD",
        train_loop=cluster.train_loop_recording_node, node_log_dir=sys.argv[1],
    ).fit()
    print("RESULT " + json.dumps({
        "connected": info.connected_to_existing,
        "token_auth": session.token_auth_on(),
        "nodes": {n["NodeID"]: n["Resources"] for n in nodes},
        "history": metric_history(result).to_dict("list"),
        "checkpoint": result.checkpoint.path,
    }))
    """
)


# A driver that joins without RAY_AUTH_MODE=token: Ray 2.60 never turns token auth on for an explicit
# address, so a cluster that uses it refuses the driver; start_ray says what to set.
WITHOUT_TOKEN_AUTH = textwrap.dedent(
    """
    from course_utils import session
    try:
        session.start_ray(verbose=False)
        print("JOINED")
    except ConnectionError as err:
        print("REFUSED " + str(err).replace(chr(10), " "))
    """
)


def test_train_on_two_nodes_through_ray_address(tmp_path, mnist_root):
    storage, node_log = tmp_path / "shared-storage", tmp_path / "nodes"
    with LocalCluster(NodeSpec(num_cpus=2), [NodeSpec(num_cpus=2, resources={"node2": 1})]) as cluster:
        out = run_driver(
            cluster,
            DRIVER,
            str(node_log),
            storage=storage,
            data=mnist_root,
            timeout_s=900,
            COURSE_PROFILE="smoke",
        )
        env = {**os.environ, **cluster.driver_env(), "COURSE_STORAGE": str(storage)}
        env.pop("RAY_AUTH_MODE")
        refused = subprocess.run(
            [sys.executable, "-c", WITHOUT_TOKEN_AUTH],
            cwd=REPO_ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        ).stdout
    ranks = {r["rank"]: r for r in (json.loads(p.read_text()) for p in node_log.glob("rank*.json"))}

    assert out["connected"], "start_ray() joined the existing cluster named by RAY_ADDRESS"
    assert out["token_auth"], "the driver joined with token auth on (cluster.driver_env)"
    assert "REFUSED The Ray cluster at" in refused and "export RAY_AUTH_MODE=token" in refused, refused
    assert len(out["nodes"]) == 2
    assert sorted(ranks) == [0, 1]
    assert ranks[0]["node_id"] != ranks[1]["node_id"], "one training worker on each node"
    assert {r["ip"] for r in ranks.values()} == {node_ip(0), node_ip(1)}, "nodes on their own loopback IPs"
    assert {r["node_id"] for r in ranks.values()} == set(out["nodes"])
    assert any("node2" in out["nodes"][r["node_id"]] for r in ranks.values()), "one worker on the second node"
    assert out["history"]["epoch"] == [0, 1] and set(out["history"]["world_size"]) == {2}
    assert out["history"]["train_loss"][1] < out["history"]["train_loss"][0]
    assert out["checkpoint"].startswith(str(storage / "course-tester" / "two-nodes" / "checkpoint_"))
