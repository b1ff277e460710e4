"""Each lesson as a learner opens it in Colab: alone, in a Python that has never seen the course.

``maintainer_tools/harness/colab.py`` copies the lesson into an empty folder outside any checkout and runs it in a fresh
virtualenv holding only a Colab-like preinstalled stack; the lesson's first code cell installs the
course from a wheel of this checkout (``COURSE_SOURCE``, standing for GitHub). The test asserts that
the install cell said what it installed and kept the runtime's PyTorch, that every cell ran with
nothing a learner reads as "it broke", that the lesson wrote its data and runs beside the notebook,
and that neither the checkout nor the kernel's home (outside the libraries' hidden caches) was
written to. CI runs lesson 06 (``CI_LESSONS``, which says why one); the weekly
job and canary set ``COURSE_COLAB_LESSONS=all``.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from maintainer_tools.harness import colab
from maintainer_tools.harness.notebook_runs import COLAB, RAY_ON_STOP, alarming_output, tier_lessons
from maintainer_tools.harness.tiers import error_text
from tests.checkout import REPO_ROOT

pytestmark = [pytest.mark.integration, pytest.mark.colab, pytest.mark.path(COLAB)]

SELECTED = tier_lessons("COURSE_COLAB_LESSONS", colab.CI_LESSONS)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    return colab.build_wheel(tmp_path_factory.mktemp("colab-dist"))


def _checkout_state() -> dict[str, int]:
    """Every file under the checkout's default data, storage and build folders, with its mtime."""
    state = {}
    for folder in ("data", "storage"):
        for path in (REPO_ROOT / folder).rglob("*"):
            state[str(path)] = path.stat().st_mtime_ns
    return state


@pytest.mark.parametrize("lesson", SELECTED, ids=[lesson.name[:2] for lesson in SELECTED])
def test_a_lesson_alone_installs_the_course_and_runs(lesson: Path, wheel: Path, tmp_path: Path):
    before = _checkout_state()
    run = colab.run_lesson(lesson, tmp_path, wheel)
    content = tmp_path / "content"
    assert run.ok, (
        f"{lesson.name} failed in a Colab-shaped venv (executed copy: {run.copy}):\n{error_text(run)}"
    )

    nb = nbformat.read(str(run.copy), as_version=4)
    install = "".join(out.get("text", "") for out in nb.cells[1].outputs)
    assert install.startswith("Installed course_utils "), f"the install cell said: {install!r}"
    assert "kept this runtime's torch " in install and " and torchvision " in install, install
    assert "pip said" not in install, install  # pip asked for its errors only (-qq): none here

    alarming = alarming_output(nb, lesson.name)
    assert not alarming, f"{lesson.name} in a Colab-shaped venv:\n  " + "\n  ".join(alarming)
    # nbclient stopped the kernel at the end, as papermill does: nothing of Ray's C++ in its terminal
    on_stop = [line for line in run.terminal().splitlines() if RAY_ON_STOP.search(line)]
    assert not on_stop, f"{lesson.name}'s kernel, stopped, printed Ray's internals: {on_stop[:20]}"

    # What the lesson wrote is beside it (its data and storage folders), and nothing in the checkout.
    written = sorted(p.name for p in content.iterdir())
    if not lesson.name.startswith("06"):  # lesson 06 removes what the course wrote
        assert (content / "data" / "MNIST").is_dir() and (content / "storage").is_dir(), written
    assert not colab.home_files(tmp_path), (
        f"{lesson.name} wrote into the home folder: {colab.home_files(tmp_path)}"
    )
    assert str(REPO_ROOT) not in run.printed(), "a lesson alone printed a path inside the checkout"
    assert _checkout_state() == before, "a lesson alone wrote into the checkout's data or storage folder"
