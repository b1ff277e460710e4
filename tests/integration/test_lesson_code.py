"""Lesson 02's loop cell is the loop its fit runs: a learner's edit there shows in the fit's output."""

from __future__ import annotations

import nbformat
import pytest

from course_utils.core.config import get_profile
from maintainer_tools import export
from maintainer_tools.harness.notebook_runs import LAPTOP, LESSONS
from maintainer_tools.harness.tiers import EDITED_TIER, error_text, run_lesson

pytestmark = [pytest.mark.integration, pytest.mark.path(LAPTOP)]

LESSON_02 = next(p for p in LESSONS if p.stem.startswith("02_"))
FIT_CELL = "# 07. TorchTrainer and fit"
SETUP_PROFILE = "profile = config.get_profile()\n"
SHORT_PROFILE = "profile = config.get_profile().with_(epochs=1, train_size=1024, test_size=256)\n"
EDIT = '        print(f"edited by the learner: rank {rank} starts epoch {epoch}", flush=True)\n'


def test_an_edited_loop_cell_is_the_loop_lesson_02_fits(mnist_root, monkeypatch):
    # Ray folds lines that differ only in numbers ("rank 0" / "rank 1") into one "[repeated 2x]" line;
    # this kernel's Ray prints every line, so each rank's own line can be looked for.
    monkeypatch.setenv("RAY_DEDUP_LOGS", "0")
    nb = nbformat.read(str(LESSON_02), as_version=4)
    (saved,) = [c for c in export.saved_cells() if c.lesson == LESSON_02.name]
    loop = nb.cells[saved.index]
    head = '    for epoch in range(config["epochs"]):\n'
    assert head in loop.source, "lesson 02's loop cell lost its epoch loop: update this test's edit"
    loop.source = loop.source.replace(head, head + EDIT)  # as a learner edits the cell, then runs on
    # What this test asks is the loop's output, not the training: one short epoch (a learner may shrink it too).
    (setup,) = [c for c in nb.cells if c.cell_type == "code" and SETUP_PROFILE in c.source]
    setup.source = setup.source.replace(SETUP_PROFILE, SHORT_PROFILE)
    fit = next(i for i, c in enumerate(nb.cells) if c.source.startswith(FIT_CELL))
    nb.cells = nb.cells[: fit + 1]  # setup through the fit: nothing after it is needed

    result = run_lesson(LESSON_02, EDITED_TIER, nb=nb)
    copy = result.copy
    assert result.error is None, error_text(result)

    printed = "".join(o.get("text", "") for o in result.nb.cells[fit].outputs if o.output_type == "stream")
    for rank in range(get_profile().num_workers):
        assert f"edited by the learner: rank {rank} starts epoch 0" in printed, (
            f"rank {rank}'s edited line is not in the fit's output ({copy}):\n{printed[-3000:]}"
        )
