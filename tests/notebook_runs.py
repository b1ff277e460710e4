"""Run a lesson the way the tests do: nbmake's runner, executed copy kept under ``build/tests``.

``answered=True`` runs the lesson as shipped and then, in the same kernel, each exercise cell
with its published solution pasted in (``course_utils.solutions``), as a learner would.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
from nbmake.nb_result import NotebookResult
from nbmake.nb_run import NotebookRun

from course_utils import solutions
from course_utils.config import build_root
from course_utils.run_course import lessons

# The paths a learner takes (README "Paths a learner takes"); tests mark themselves with
# @pytest.mark.path(NAME) and the end of the test output sums each path up (conftest.py).
LAPTOP = "laptop: local Ray, local storage, lessons as shipped"
ANSWERED = "exercises answered (solutions pasted, same kernel)"
CLUSTER = "cluster someone else started: `ray start --head` + RAY_ADDRESS"
S3 = "S3-compatible storage: COURSE_STORAGE=s3://bucket/prefix (moto server on loopback)"
SHARED = "shared storage and cluster: only the learner's own things are removed"
GPU = "GPU runner, 1 or N GPUs: the lesson plans for 0, 1 and 4 GPUs, gpu.yml's probe"
BROWSER = "JupyterLab in a browser: ./build.sh lab headless + Chromium (Playwright), every lesson from the UI"

LESSONS = lessons()  # notebooks/NN_*.ipynb in order, as ./build.sh course runs them


def run_lesson(path: Path, label: str, *, answered: bool, timeout_s: int = 600) -> NotebookResult:
    """Execute ``path`` in a fresh course kernel; the executed copy is ``build/tests/<label>/<name>``."""
    nb = solutions.answered_notebook(path) if answered else nbformat.read(str(path), as_version=4)
    out_dir = build_root() / "tests" / label
    out_dir.mkdir(parents=True, exist_ok=True)
    copy = out_dir / Path(path).name
    nbformat.write(nb, str(copy))
    result = NotebookRun(copy, timeout_s).execute()  # the kernel the notebook names: the course's
    nbformat.write(result.nb, str(copy))
    return result


def error_text(result: NotebookResult) -> str:
    """The failing cell's summary and traceback, for an assertion message."""
    if result.error is None:
        return ""
    return f"cell {result.error.failing_cell_index}: {result.error.summary}\n{result.error.trace[-4000:]}"


# ------------------------------------------------------------ what a learner reads as "it broke"

TRACEBACK = "Traceback (most recent call last)"
REPORT_DUMP = "TrainingReport("  # Ray Train's INFO line for every report of every rank
# Cells that show a failure on purpose, by lesson and the cell's first line: a traceback there
# is the lesson (lesson 04 injects faults; Ray Train logs the failing rank's traceback).
FAILURES_ON_PURPOSE: dict[str, tuple[str, ...]] = {
    "04_fault_tolerance.ipynb": (
        "# 03. Automatic retries: a rank crashes mid-epoch",
        "# 07. A worker killed from outside, resumed at the exact batch",
        "# 08. Elastic training: a node joins and the group grows, a node leaves and it shrinks",
        "# 09. Troubleshooting: a hang when one rank skips report",
        "# 13. Exercise 3: make a loop resumable",  # the check crashes the learner's loop once
    ),
}


# Cells whose stderr the lesson announces in the markdown before them, by lesson and first line, with
# the phrase every such line carries: lesson 03's split-hang demo runs beside the main fit, and Ray
# Data's warning about its waiting reader may land in the fit's output (cell 23's text says so).
ANNOUNCED_STDERR: dict[str, dict[str, str]] = {
    "03_ray_data_integration.ipynb": {
        "# 11. TorchTrainer with datasets=": "blocked waiting on other clients"
    },
}


def alarming_output(nb, name: str) -> list[str]:
    """Output of a lesson that ran fine which a learner would read as "it broke", one line each.

    Any stderr line (red in a notebook) in a cell not listed in ``FAILURES_ON_PURPOSE[name]``, except
    the announced ones (``ANNOUNCED_STDERR``); a traceback in such a cell; and any ``TrainingReport(``
    dump (Ray Train's INFO chatter, kept in the log folder by ``RunConfig(logging_config=...)``).
    A cell that raised is not counted here: the run already failed on it.
    """
    allowed = FAILURES_ON_PURPOSE.get(name, ())
    announced = ANNOUNCED_STDERR.get(name, {})
    found = []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        first = cell.source.splitlines()[0] if cell.source else ""
        text = "".join(out.get("text", "") for out in cell.get("outputs", []) if out.output_type == "stream")
        stderr = [
            line
            for out in cell.get("outputs", [])
            if out.output_type == "stream" and out.get("name") == "stderr"
            for line in out.get("text", "").splitlines()
            if line.strip()
        ]
        if first in announced:
            stderr = [line for line in stderr if announced[first] not in line]
        if stderr and first not in allowed:
            found.append(
                f"cell {index} ({first!r}): {len(stderr)} line(s) on stderr, the first: {stderr[0][:200]!r}"
            )
        if TRACEBACK in text and first not in allowed:
            found.append(f"cell {index} ({first!r}): a traceback ending {_exception_line(text)!r}")
        if REPORT_DUMP in text:
            found.append(f"cell {index} ({first!r}): {text.count(REPORT_DUMP)} {REPORT_DUMP!r} dump(s)")
    return found


def _exception_line(text: str) -> str:
    """The first traceback's ``SomeError: message`` line, without Ray's colour and ``(Actor pid=..)`` prefix."""
    import re

    lines = text[text.index(TRACEBACK) :].splitlines()[1:]
    for line in lines:
        plain = re.sub(r"\x1b\[[0-9;]*m", "", line)
        plain = re.sub(r"^\([^)]*\)\s?", "", plain)
        if plain and not plain.startswith(" "):
            return plain[:200]
    return ""
