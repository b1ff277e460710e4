"""Ray Train's run state and a hung rank's stack, read from a live local Ray (course_utils.runstate, .stacks).

Two tiny 2-worker runs (no model, no data: seconds of training, ~15-20 s of Ray Train start-up each):
one whose rank 1 raises once and is retried (the state API must list 2 attempts, the first failed),
one where rank 1 never reaches its report (the stacks taken during the hang must show rank 0 at its
report line and rank 1 inside its own code).
"""

from __future__ import annotations

import os

import pytest

pytestmark = pytest.mark.integration


def test_retried_run_lists_two_attempts_first_failed(ray_session, storage, tmp_path):
    import ray
    from ray.train import FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    from course_utils import runstate

    assert os.environ.get(runstate.STATE_TRACKING_ENV) == "1", "session.start_ray() turns state tracking on"

    def flaky(config):
        import pathlib

        import ray.train

        rank = ray.train.get_context().get_world_rank()
        ray.train.report({"step": 0})
        marker = pathlib.Path(config["marker"])
        if rank == 1 and not marker.exists():
            marker.touch()
            raise RuntimeError("injected once on rank 1")
        ray.train.report({"step": 1})

    TorchTrainer(
        flaky,
        train_loop_config={"marker": str(tmp_path / "crashed")},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(
            name="inspect-live-retry", storage_path=str(storage), failure_config=FailureConfig(max_failures=1)
        ),
    ).fit()

    state = runstate.run_state("inspect-live-retry", job_id=ray.get_runtime_context().get_job_id())
    assert state.runs["status"].tolist() == ["FINISHED"] and state.runs["attempts"].tolist() == [2]
    assert state.attempts["status"].tolist() == ["ERRORED", "FINISHED"]
    assert state.attempts["error"].iloc[0] == "RuntimeError: injected once on rank 1"
    ranks = state.workers.groupby("attempt")["world_rank"].apply(list).to_dict()
    assert ranks == {1: [0, 1], 2: [0, 1]}
    pids = state.workers.groupby("attempt")["pid"].apply(set)
    assert pids[1].isdisjoint(pids[2]), "the retry ran in new worker processes"


def test_hang_stacks_show_both_ranks_in_the_learners_code(ray_session, storage, monkeypatch):
    from ray.train import RunConfig, ScalingConfig, TrainingFailedError
    from ray.train.torch import TorchTrainer

    from course_utils import stacks

    def stuck_elsewhere():
        import time

        time.sleep(60)  # rank 1's bug: busy somewhere else instead of reporting

    def hang_loop(config):
        import ray.train

        if ray.train.get_context().get_world_rank() == 1:
            stuck_elsewhere()
        ray.train.report({"done": 1})

    monkeypatch.setenv("RAY_TRAIN_COLLECTIVE_WARN_INTERVAL_S", "2")
    monkeypatch.setenv("RAY_TRAIN_COLLECTIVE_TIMEOUT_S", "6")
    watch = stacks.HangWatch("inspect-live-hang").start()
    with pytest.raises(TrainingFailedError) as failed:
        TorchTrainer(
            hang_loop,
            scaling_config=ScalingConfig(num_workers=2),
            run_config=RunConfig(name="inspect-live-hang", storage_path=str(storage)),
        ).fit()
    watch.join()
    assert "have not joined" in str(failed.value)
    assert watch.warning and "join the `ray.train.report` call: [1]" in watch.warning
    by_rank = {stack.rank: stack for stack in watch.stacks}
    assert sorted(by_rank) == [0, 1], "both ranks found, with their ranks, through Ray Train's run state"
    waiting = by_rank[0].learner_frames()
    assert [f.function.split(".")[-1] for f in waiting] == ["hang_loop"]
    assert "ray.train.report" in waiting[0].source()
    skipping = by_rank[1].learner_frames()
    assert [f.function.split(".")[-1] for f in skipping] == ["hang_loop", "stuck_elsewhere"]
    assert "time.sleep(60)" in skipping[-1].source()
    assert by_rank[1].waiting_in().function.endswith("sleep") or "sleep" in by_rank[1].describe()
    assert all(stack.source == "py-spy" for stack in watch.stacks)


def test_split_hang_warning_stack_and_error(ray_session):
    """One reader of a streaming_split never reads: Ray Data warns (after its fixed 30 s), the waiting
    reader's stack is in read_shard, and the bounded wait raises SplitHangError naming the idle one."""
    import time

    import ray
    import ray.data

    from course_utils import stacks

    shards = ray.data.range(1000).map_batches(lambda batch: batch, batch_format="numpy").streaming_split(2)
    reader_cls = ray.remote(num_cpus=0)(stacks.SplitReader)
    readers = [reader_cls.remote() for _ in shards]
    try:
        where = ray.get([reader.where.remote() for reader in readers])
        started = time.monotonic()
        reading = readers[0].read_shard.remote(shards[0])
        warning = stacks.wait_for(stacks.split_warning, timeout_s=90)
        assert "StreamSplitDataIterator(epoch=-1, split=0) blocked waiting on other clients" in warning
        found = stacks.worker_stacks([dict(w, rank=i, role="reader") for i, w in enumerate(where)])
        assert [f.function for f in found[0].learner_frames(["read_shard"])] == ["SplitReader.read_shard"]
        assert "shard.iter_batches" in found[0].learner_frames(["read_shard"])[0].source()
        assert found[1].learner_frames(["read_shard"]) == []
        with pytest.raises(stacks.SplitHangError) as hang:
            stacks.wait_for_readers([reading], timeout_s=1, since=started, stacks=found)
        assert "reader 1" in str(hang.value)
    finally:
        for reader in readers:
            ray.kill(reader)


def test_a_task_pinned_to_a_node_reads_a_stack_there(ray_session):
    # What lesson 04 does for a rank on another machine, here pinned to this node: no dashboard route.
    import subprocess
    import sys
    import time

    import ray

    from course_utils import stacks

    code = "import time\ndef learner_sleep():\n    time.sleep(60)\nlearner_sleep()\n"
    proc = subprocess.Popen([sys.executable, "-c", code])
    try:
        time.sleep(1.0)
        threads = stacks.dump_on_its_node(proc.pid, ray.get_runtime_context().get_node_id())
    finally:
        proc.kill()
        proc.wait()
    frames = next(iter(threads.values()))
    assert [f.function for f in stacks.learner_frames(frames, ["learner_sleep"])] == ["learner_sleep"]
    with pytest.raises(stacks.StackUnavailable, match=r"^on node \w{8}: py-spy dump --pid \d+ failed"):
        stacks.dump_on_its_node(proc.pid, ray.get_runtime_context().get_node_id())  # gone now
