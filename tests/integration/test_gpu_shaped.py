"""The GPU-shaped tier: lessons 05 and 06 on a Ray cluster that declares 1 GPU, on this CPU machine.

``ray start --num-gpus=N`` makes Ray schedule by N GPUs whether or not the machine has them: the model
actor, the batch-inference pool and the resource preflights then decide exactly as on a GPU node, while
torch, seeing no CUDA, computes on the CPU. A pool that can never start hangs here as it would on a
GPU runner, so each cell has a time limit, and a failure names the actors still waiting for resources
(Ray's state API), which is where a hang shows. Fits cannot be faked (``use_gpu=True`` needs a driver):
they stay on CPU workers, as ``course_utils.core.plan`` decides with no GPU visible to torch.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import pytest

from course_utils.internals.periodic import every
from maintainer_tools.cluster import LocalCluster, NodeSpec
from maintainer_tools.harness.notebook_runs import GPU_SHAPED, LESSONS, alarming_output
from maintainer_tools.harness.tiers import GPU_SHAPED_TIER, error_text, run_lesson
from tests.checkout import REPO_ROOT

pytestmark = [pytest.mark.integration, pytest.mark.path(GPU_SHAPED)]

TIER_LESSONS = [p for p in LESSONS if p.stem[:2] in ("05", "06")]
# Per cell: lesson 05's longest cell trains lesson 02's run when storage has none (about 90 s here).
CELL_TIMEOUT_S = 240

# Actors the cluster has not been able to place, with what each asks for: the names of a hang.
WAITING = textwrap.dedent(
    """
    import os
    from ray.util.state import list_actors

    for a in list_actors(address=os.environ["RAY_ADDRESS"], filters=[("state", "=", "PENDING_CREATION")],
                         detail=True, limit=100, raise_on_missing_output=False):
        print(f"WAITING {a.class_name} asks for {a.required_resources} (namespace {a.ray_namespace})")
    """
)


def waiting_actors(cluster: LocalCluster) -> list[str]:
    """One line per actor of ``cluster`` still waiting to be placed (state PENDING_CREATION)."""
    run = subprocess.run(
        [sys.executable, "-c", WAITING],
        cwd=REPO_ROOT,
        env={**os.environ, **cluster.driver_env()},
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = [line[len("WAITING ") :] for line in run.stdout.splitlines() if line.startswith("WAITING ")]
    return lines or [f"(none listed; state API said: {run.stderr.strip()[-300:] or 'nothing'})"]


# What runs on each cluster, in order, with one storage folder: lesson 05 finds no run of lesson 02 and
# trains it, then lesson 06 removes what the course made. One GPU is the tight case (the pool's actors take
# half a GPU each, and lesson 05 must free its model actor first); how 2 declared GPUs size the pool and
# the preflights is test_preflights_and_pools_decide_by_the_declared_gpus's, without a second lesson run.
STEPS = [(1, ("05", "06"))]


def _run_on_cluster(gpus: int, stems: tuple[str, ...], monkeypatch) -> list[str]:
    """Run the lessons named by ``stems`` on a fresh cluster that declares ``gpus`` GPUs; their times."""
    times = []
    with LocalCluster(NodeSpec(num_cpus=4, num_gpus=gpus), nodes=[], dashboard=True) as cluster:
        for key, value in cluster.driver_env().items():
            monkeypatch.setenv(key, value)  # the lesson's kernel inherits them: RAY_ADDRESS, token auth
        for lesson in [p for p in TIER_LESSONS if p.stem[:2] in stems]:
            started = time.monotonic()
            # A timed-out cell's kernel is shut down, and its waiting actors with it: name them from the
            # last look taken while the lesson ran.
            seen: list[str] = []

            def look(seen=seen) -> None:
                now = waiting_actors(cluster)
                if not now[0].startswith("(none"):
                    seen[:] = [f"{time.strftime('%H:%M:%S')} {line}" for line in now]

            with every(look, 30.0, "waiting-actors"):
                result = run_lesson(
                    lesson, GPU_SHAPED_TIER.named(f"gpu-shaped-{gpus}"), timeout_s=CELL_TIMEOUT_S
                )
            times.append(f"{lesson.stem[:2]} {time.monotonic() - started:.0f} s")
            if result.error is not None:
                cell = result.nb.cells[result.error.failing_cell_index]
                first = cell.source.splitlines()[0] if cell.source else ""
                pytest.fail(
                    f"{lesson.name} on a cluster that declares {gpus} GPU(s) failed in cell "
                    f"{result.error.failing_cell_index} ({first!r}); actors that waited for resources "
                    "(last look while it ran):\n  "
                    + "\n  ".join(seen or ["none seen"])
                    + f"\n{error_text(result)[-2500:]}",
                    pytrace=False,
                )
            alarming = alarming_output(result.nb, lesson.name)
            assert not alarming, f"{lesson.name} with {gpus} declared GPU(s) reads as 'it broke': {alarming}"
    return times


@pytest.mark.notebooks
def test_lessons_05_06_on_a_cluster_that_declares_1_gpu(tmp_path, mnist_root, monkeypatch, summary_note):
    for key, value in {
        "COURSE_PROFILE": "smoke",  # torch sees no GPU: the plan is the CPU one, the cluster's GPUs are Ray's
        "CUDA_VISIBLE_DEVICES": "",
        "COURSE_STORAGE": str(tmp_path / "storage"),
        "COURSE_DATA": str(mnist_root),
        "COURSE_LEARNER": "gpu-shaped",
    }.items():
        monkeypatch.setenv(key, value)
    for gpus, stems in STEPS:
        times = _run_on_cluster(gpus, stems, monkeypatch)
        summary_note(f"GPU-shaped tier, {gpus} declared GPU(s): " + ", ".join(times))


@pytest.mark.parametrize("gpus", [1, 2], ids=["1gpu", "2gpus"])
def test_preflights_and_pools_decide_by_the_declared_gpus(gpus, mnist_root, monkeypatch):
    """On a local Ray that declares GPUs: a fit's preflight, lesson 03's CPU split and lesson 05's pool."""
    import ray
    from ray.train import ScalingConfig

    from course_utils.core import session
    from course_utils.lesson05 import inference

    monkeypatch.setenv("COURSE_PROFILE", "smoke")
    if ray.is_initialized():
        ray.shutdown()
    session.start_ray(num_cpus=4, num_gpus=gpus, verbose=False)
    try:
        session.check_resources(ScalingConfig(num_workers=gpus, use_gpu=True))
        with pytest.raises(session.ResourceError) as refused:
            session.check_resources(ScalingConfig(num_workers=gpus + 1, use_gpu=True))
        left, sentence = session.cpu_split(ScalingConfig(num_workers=gpus, use_gpu=True))
        pool = inference.plan_pool(2)

        @ray.remote(num_cpus=1, num_gpus=1)
        class ModelActor:  # what lesson 05's ModelWorker asks for on this cluster
            def ping(self) -> str:
                return "holding a GPU"

        held = ModelActor.remote()
        ray.get(held.ping.remote())
        beside = inference.plan_pool(2)
        ray.kill(held, no_restart=True)
    finally:
        ray.shutdown()
    assert f"the cluster has {gpus} GPU" in str(refused.value) and "Use fewer workers" in str(refused.value)
    assert left == 4 and "no CPU slot" in sentence and "training workers 0" not in sentence
    assert (pool.size, pool.num_gpus) == (2, 0.5 if gpus == 1 else 1.0)
    # With the model actor alive: on 1 GPU nothing fits (the hang's shape: the lesson frees it first);
    # on 2 GPUs the pool is sized down to the one GPU left.
    assert beside.size == (0 if gpus == 1 else 1), beside
