"""build.sh's Python choice (3.11-3.13, $PYTHON first), the lock file it installs with, and its
stale-lock check. Each runs build.sh's own functions in bash; nothing is installed."""

import re
import subprocess
import sys
from pathlib import Path

from course_utils.canary import normalise, pinned_versions
from course_utils.config import REPO_ROOT


def _bash(
    script: str, env: dict[str, str] | None = None, root: Path = REPO_ROOT
) -> subprocess.CompletedProcess:
    """``script`` after build.sh's definitions (its command dispatch cut off), ROOT set to ``root``."""
    prelude = f"""source <(sed '/^cmd=/,$d' {REPO_ROOT / "build.sh"})
ROOT={root}; LOCK=$ROOT/requirements.lock; PY={sys.executable}
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
    wanted = pinned_versions((REPO_ROOT / "requirements.txt").read_text())
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
