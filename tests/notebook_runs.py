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
