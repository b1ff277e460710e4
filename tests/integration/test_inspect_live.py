"""A hung rank's stack, read from a live local Ray (course_utils.internals.stacks).

A tiny 2-worker run (no model, no data: ~15-20 s of Ray Train start-up) where rank 1 is busy in its
own code instead of reaching its report: the stacks taken during the hang must show rank 0 at its
report line and rank 1 inside its own code (lesson 04's hang has rank 1 leave the function instead).
Ray Train's run table of a retried run (two attempts, new worker processes) is lesson 04's section 16,
and a streaming split's hang (Ray Data's warning, the stacks, SplitHangError) lesson 03's section 17:
both assert it where the laptop tier runs them at each push.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.integration


def test_hang_stacks_show_both_ranks_in_the_learners_code(ray_session, storage, monkeypatch):
    from ray.train import RunConfig, ScalingConfig, TrainingFailedError
    from ray.train.torch import TorchTrainer

    from course_utils.internals import stacks

    def stuck_elsewhere():
        import time

        time.sleep(60)  # rank 1's bug: busy somewhere else instead of reporting

    def hang_loop(config):
        import ray.train

        if ray.train.get_context().get_world_rank() == 1:
            stuck_elsewhere()
        ray.train.report({"done": 1})

    monkeypatch.setenv("RAY_TRAIN_COLLECTIVE_WARN_INTERVAL_S", "2")
    # The dumps must land while rank 0 still waits in report: on a loaded 2-core machine they
    # took over 4 s once (a 6 s timeout ended the wait first), so the hang holds for 15 s.
    monkeypatch.setenv("RAY_TRAIN_COLLECTIVE_TIMEOUT_S", "15")
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
    assert sorted(by_rank) == [0, 1], watch.report("both ranks found, through Ray Train's run state")
    waiting = by_rank[0].learner_frames()
    assert [f.function.split(".")[-1] for f in waiting] == ["hang_loop"], watch.report(
        "rank 0 waits at its report"
    )
    assert "ray.train.report" in waiting[0].source()
    skipping = by_rank[1].learner_frames()
    assert [f.function.split(".")[-1] for f in skipping] == ["hang_loop", "stuck_elsewhere"], watch.report(
        "rank 1 is busy in its own code"
    )
    assert "time.sleep(60)" in skipping[-1].source()
    assert by_rank[1].waiting_in().function.endswith("sleep") or "sleep" in by_rank[1].describe()
    assert all(stack.source == "py-spy" for stack in watch.stacks)


def test_a_task_pinned_to_a_node_reads_a_stack_there(ray_session):
    # What lesson 04 does for a rank on another machine, here pinned to this node: no dashboard route.
    import subprocess
    import sys
    import time

    import ray

    from course_utils.internals import stacks

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
