"""A fit on a cluster whose slots another learner holds: one plain line while it waits, no Ray
traceback, and it trains once the slots are free (issue: a busy cluster reads as a crash).

A real ``ray start --head`` with 2 CPU slots; another driver (learner "other") holds both with an
actor for a while; this learner's 2-worker fit starts meanwhile, through the course's
``fit_progress`` as the lessons run it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from maintainer_tools.cluster import LocalCluster, NodeSpec
from maintainer_tools.harness.notebook_runs import CLUSTER, SHARED
from tests.checkout import REPO_ROOT

pytestmark = [pytest.mark.integration, pytest.mark.path(CLUSTER), pytest.mark.path(SHARED)]

HOLD_S = 20

# Another learner's session holding every slot: an actor of 2 CPUs, for HOLD_S after it says so.
HOLDER = textwrap.dedent(
    f"""
    import time
    import ray
    from course_utils.core import session

    session.start_ray(verbose=False, log_to_driver=False)

    @ray.remote(num_cpus=2)
    class Busy:
        def ping(self):
            return "busy"

    busy = Busy.remote()
    print("HOLDING", ray.get(busy.ping.remote()), flush=True)
    time.sleep({HOLD_S})
    print("RELEASED", time.time(), flush=True)
    """
)

FIT = textwrap.dedent(
    """
    import json, time
    from course_utils.core import config, session, training
    from course_utils.core.history import metric_history
    from course_utils.core.progress import fit_progress
    from course_utils.lesson_code import train_loop_per_worker

    store = session.start_ray(verbose=False).storage
    tiny = config.SMOKE.with_(epochs=1, train_size=256, test_size=64, batch_size=64)
    trainer = training.make_trainer(
        "busy-cluster", tiny, num_workers=2, store=store, train_loop=train_loop_per_worker
    )
    with fit_progress(trainer, total=tiny.epochs):
        started = time.time()
        result = trainer.fit()
    print("RESULT " + json.dumps({"fit_started": started, "epochs": metric_history(result)["epoch"].tolist()}))
    """
)


def test_a_fit_waits_for_slots_in_plain_words_and_then_trains(tmp_path, mnist_root):
    with LocalCluster(NodeSpec(num_cpus=2), []) as cluster:
        env = {
            **os.environ,
            **cluster.driver_env(),
            "COURSE_STORAGE": str(tmp_path / "storage"),
            "COURSE_DATA": str(mnist_root),
            "COURSE_PROFILE": "smoke",
        }
        holder = subprocess.Popen(
            [sys.executable, "-c", HOLDER],
            cwd=REPO_ROOT,
            env={**env, "COURSE_LEARNER": "other"},
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        try:
            assert holder.stdout.readline().startswith("HOLDING"), "the other learner's session did not start"
            fit = subprocess.run(
                [sys.executable, "-c", FIT],
                cwd=REPO_ROOT,
                env={**env, "COURSE_LEARNER": "tester"},
                capture_output=True,
                text=True,
                timeout=600,
            )
            released = float(holder.stdout.read().split()[-1])
            logs = cluster.logs() if fit.returncode else ""
        finally:
            holder.kill()
            holder.wait(timeout=30)
    assert fit.returncode == 0, f"the fit failed:\n{fit.stdout[-3000:]}\n{fit.stderr[-5000:]}\n{logs}"
    out = json.loads(next(line for line in fit.stdout.splitlines() if line.startswith("RESULT "))[7:])
    print(fit.stderr[-2000:])
    assert "waiting for 2 CPU slots: 0 of 2 free" in fit.stderr, fit.stderr[-3000:]
    assert "this run starts when they finish" in fit.stderr
    assert out["fit_started"] >= released - 1.0, "fit() began before the other learner released the slots"
    assert out["epochs"] == [0], out
    for alarming in ("Traceback", "startup timed out", "WorkerGroupStartupTimeoutError", "issues/3644"):
        assert alarming not in fit.stdout + fit.stderr, (
            f"{alarming!r} in the learner's output:\n{fit.stderr[-3000:]}"
        )
