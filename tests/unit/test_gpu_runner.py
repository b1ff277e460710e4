"""gpu.yml's steps as far as a machine without a GPU can run them: the GPU probe must fail with
one clear line (not a traceback), and say how many GPUs it found when there are some."""

import os
import shlex
import subprocess

import pytest
import yaml

from course_utils.core import device
from maintainer_tools.harness.notebook_runs import GPU as GPU_PATH
from tests.checkout import REPO_ROOT

pytestmark = pytest.mark.path(GPU_PATH)


def _probe_step() -> tuple[dict, dict]:
    workflow = yaml.safe_load((REPO_ROOT / ".github" / "workflows" / "gpu.yml").read_text())
    (job,) = workflow["jobs"].values()
    step = next(s for s in job["steps"] if s.get("name") == "GPUs visible to PyTorch")
    return job, step


def _probe_command() -> str:
    """The probe after ``./build.sh setup &&`` (setup itself is the CPU workflow's first step too)."""
    _, step = _probe_step()
    setup, _, probe = step["run"].partition("&&")
    assert setup.strip() == "./build.sh setup" and probe.strip(), step["run"]
    return probe.strip()


def test_gpu_probe_is_the_first_run_step_before_the_tests():
    job, step = _probe_step()
    runs = [s for s in job["steps"] if "run" in s]
    assert runs[0] is step and "./build.sh test" in runs[-1]["run"]


def test_gpu_probe_fails_in_one_line_without_a_gpu():
    job, _ = _probe_step()
    env = {**os.environ, **{k: str(v) for k, v in job.get("env", {}).items()}, "CUDA_VISIBLE_DEVICES": ""}
    run = subprocess.run(
        shlex.split(_probe_command()), cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 1, f"the probe passed on a machine without a GPU:\n{run.stdout}{run.stderr}"
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in run.stderr, run.stderr
    assert lines[0].startswith("error: no GPU visible to PyTorch") and "needs a runner with a GPU" in lines[0]
    assert "CUDA_VISIBLE_DEVICES=''" in lines[0], "the message names what hid the GPUs"


def test_device_probe_counts_gpus(monkeypatch, capsys):
    monkeypatch.setattr(device, "gpu_count", lambda: 0)
    assert device.gpu_report_cli([]) == 0 and capsys.readouterr().out.startswith("0 GPU(s) visible")
    assert device.gpu_report_cli(["--require-gpu"]) == 1
    assert "no GPU visible" in capsys.readouterr().err
