"""``bench train --gpu`` runs its four ways end to end before a GPU machine is paid for: the same steps
on the CPU with tiny sizes (``--cpu-rehearsal``). Its figures are not checked: only that every way ran
and printed its line, and that it ends with the two ratios the GPU comparison is for."""

import os
import re
import subprocess
import sys

import pytest

from maintainer_tools.harness.notebook_runs import GPU_SHAPED, every_lesson
from tests.checkout import REPO_ROOT

pytestmark = [pytest.mark.integration, pytest.mark.path(GPU_SHAPED)]


# A maintainer's tool, not a learner's path, and three minutes of fits on a slow day: the weekly job runs
# it, as should whoever is about to rent a GPU for the bench.
@pytest.mark.skipif(
    not every_lesson("COURSE_BENCH_REHEARSAL"),
    reason="weekly, or COURSE_BENCH_REHEARSAL=all: rehearses a maintainer's bench, not a learner's path",
)
def test_bench_train_gpu_runs_every_way_in_a_cpu_rehearsal(mnist_root):
    run = subprocess.run(
        [sys.executable, "-m", "maintainer_tools.bench", "train", "--gpu", "--cpu-rehearsal"]
        + ["--rows", "256", "--epochs", "2", "--batch-size", "64"],
        cwd=REPO_ROOT,
        env={**os.environ, "CUDA_VISIBLE_DEVICES": "", "COURSE_DATA": str(mnist_root)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    ours = [
        line for line in run.stdout.splitlines() if re.fullmatch(r"[a-z_]+: \S.*", line)
    ]  # not Ray's lines
    values = dict(line.split(": ", 1) for line in ours)
    for way in ("plain", "ray_train", "ray_data", "ceiling"):
        assert float(values[f"{way}_images_per_s"]) > 0, f"{way} did not train: {run.stdout}"
    assert values["images_per_epoch"] == "256"
    last = [line.split(":")[0] for line in ours[-2:]]
    assert last == ["ray_train_vs_plain_gpu_ratio", "plain_vs_ceiling_ratio"], run.stdout
