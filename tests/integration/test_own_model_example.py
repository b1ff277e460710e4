"""examples/own_model_and_data.py (docs/going-further.md, "Your own model and data"): another model and
dataset in lesson 02's loop, run as a learner runs it, offline."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from maintainer_tools.harness.notebook_runs import LAPTOP
from tests.checkout import REPO_ROOT

pytestmark = [pytest.mark.integration, pytest.mark.path(LAPTOP)]


def test_another_model_and_dataset_train_in_the_lessons_loop(tmp_path):
    env = dict(os.environ, COURSE_STORAGE=str(tmp_path / "storage"), COURSE_DATA=str(tmp_path / "data"))
    env.pop("RAY_ADDRESS", None)
    done = subprocess.run(
        [sys.executable, "examples/own_model_and_data.py"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    found = re.search(r"own-model-and-data: accuracy ([\d.]+) after 10 epochs", done.stdout)
    assert found, done.stdout[-2000:]
    assert float(found[1]) >= 0.9, f"an MLP on 8x8 digits should pass 0.9 in 10 epochs: {found[0]}"
    runs = [p for p in (tmp_path / "storage").glob("course-*/own-model-and-data/checkpoint_*") if p.is_dir()]
    assert len(runs) == 1, f"one checkpoint kept (num_to_keep=1): {runs}"
