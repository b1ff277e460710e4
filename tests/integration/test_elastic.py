"""Lesson 04's elastic run on a real local Ray, small: a ``(1, 2)`` run starts with 1 worker on
the one extra node that has the run's slot resource, grows to 2 when a second such node joins
(the controller's own resize decision, read from its log), and shrinks to 1 when that node
leaves; each new group resumes from the last checkpoint and the global batch stays the same."""

from __future__ import annotations

import os
import uuid

import pytest

from course_utils import elastic, faults, history, lesson_code, training
from course_utils import storage as runs_storage
from course_utils.config import get_profile

pytestmark = pytest.mark.integration


@pytest.mark.usefixtures("storage")
def test_an_elastic_run_grows_when_a_node_joins_and_shrinks_when_it_leaves(ray_session, tmp_path):
    from ray.train import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    slot = f"test_slot_{uuid.uuid4().hex[:8]}"
    nodes, reason = elastic.add_local_nodes(1, num_cpus=1, resources={slot: 1})
    assert reason is None
    joining = elastic.ExtraNode(num_cpus=1, resources={slot: 1})
    profile = get_profile("smoke").with_(
        epochs=3, train_size=256, test_size=128, batch_size=64, num_workers=2
    )
    name = f"elastic-{uuid.uuid4().hex[:6]}"
    grow = faults.crash_once(tmp_path / "grow", rank=0, epoch=1, step=0, how="external")
    shrink = faults.crash_once(tmp_path / "shrink", rank=1, epoch=2, step=0, how="external")

    def registered(n: int) -> bool:
        return len(runs_storage.reported_checkpoints(name)) >= n

    elastic.refresh_autoscaling_coordinator()
    joining.start_when(lambda: registered(1), then=elastic.refresh_autoscaling_coordinator)
    joining.stop_when(lambda: registered(2), graceful=True, then=elastic.refresh_autoscaling_coordinator)
    path, fs = runs_storage.ray_storage()
    trainer = TorchTrainer(
        lesson_code.train_loop_resumable,
        train_loop_config=training.loop_config(profile, fault=[grow, shrink]),
        scaling_config=ScalingConfig(
            num_workers=(1, 2), resources_per_worker={"CPU": 1, slot: 1}, elastic_resize_monitor_interval_s=1
        ),
        run_config=RunConfig(
            name=name,
            storage_path=path,
            storage_filesystem=fs,
            checkpoint_config=CheckpointConfig(num_to_keep=2),
            failure_config=FailureConfig(max_failures=1),
        ),
    )
    previous = os.environ.get("RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S")
    os.environ["RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S"] = "3"
    try:
        result = trainer.fit()
    finally:
        for node in [*nodes, joining]:
            node.stop()
        if previous is None:
            os.environ.pop("RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S")
        else:
            os.environ["RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S"] = previous
    runs = history.metric_history(result)
    assert runs["world_size"].tolist() == [1, 2, 1], "1 worker, 2 once the node joined, 1 once it left"
    assert runs["start_epoch"].tolist() == [0, 1, 2], "each new group resumed from the last checkpoint"
    assert {profile.batch_size // w * w for w in runs["world_size"]} == {profile.batch_size}
    decisions = elastic.scaling_decisions(name)
    resized = [d for d in decisions if d["kind"] == "resize"]
    assert [d["workers"] for d in resized] == [2], "the controller's own decision to grow"
    # joined_time is the driver's last look before the node was listed: it registered after it
    assert resized[0]["time"] > joining.joined_time, "after the node registered"
    assert decisions[-1]["workers"] == 1 and decisions[-1]["time"] > joining.stop_sent_at, "after it left"
