"""ruff lint and format over course_utils, maintainer_tools and tests (settings in pyproject.toml), as ./build.sh test runs it."""

import subprocess
import sys
from pathlib import Path

import pytest

from tests.checkout import REPO_ROOT

TARGETS = ["course_utils", "maintainer_tools", "tests"]


def _ruff(*args: str) -> subprocess.CompletedProcess:
    ruff = Path(sys.executable).with_name("ruff")
    command = [str(ruff)] if ruff.exists() else [sys.executable, "-m", "ruff"]
    return subprocess.run(
        [*command, *args, *TARGETS], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300
    )


@pytest.mark.parametrize(
    "args, fix",
    [
        (
            ("check", "--no-cache", "--output-format=concise"),
            "ruff check --fix course_utils maintainer_tools tests",
        ),
        (("format", "--no-cache", "--check", "--diff"), "ruff format course_utils maintainer_tools tests"),
    ],
    ids=["check", "format"],
)
def test_ruff(args, fix):
    run = _ruff(*args)
    assert run.returncode == 0, f"`ruff {' '.join(args)}` failed; run `{fix}`:\n{run.stdout}{run.stderr}"
