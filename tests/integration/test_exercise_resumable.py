"""Lesson 04's resumable-loop exercise, checked for real (weekly, or COURSE_ALL_MISTAKES=all): the check
crashes rank 1 once early in epoch 1; a loop that ignores the checkpoint (or restores only the weights, or
forgets its step count) fails with a message that names it. That the published solution resumes and passes
is the answered lesson's (conftest.py runs it and requires "correct"), not one more fit here."""

import re

import pytest

from course_utils.exercises import checks, lesson04
from maintainer_tools.harness.notebook_runs import every_lesson

pytestmark = pytest.mark.integration

# What lesson 04 has imported when the learner's function is defined (setup cell + exercise cell).
PRELUDE = """
import time
import ray.train
import ray.train.torch
import torch
from course_utils.core import checkpoints, data
from course_utils.core.checkpoints import load_state, rank0_checkpoint, set_rng_state, training_state
from course_utils.core.model import build_resnet18, unwrap
from course_utils.core.steps import epoch_metrics, train_one_epoch
from course_utils.core.plan import per_worker_batch
"""

SOLUTION = re.search(r"```python\n(.*?)```", checks.solution_text("04.4"), re.S).group(1)
RESTORE = """        set_rng_state(state["rng"])
        start_epoch, history = state["epoch"] + 1, state["history"]
"""

# mistake -> (exact text of the solution to change, its replacement, words the message must hold)
MISTAKES = {
    "not resumable": (
        "    checkpoint = ray.train.get_checkpoint()",
        "    checkpoint = None",
        "ignores ray.train.get_checkpoint()",
    ),
    "weights but not the epoch": (
        RESTORE,
        '        set_rng_state(state["rng"])\n',
        "restored the weights but not the epoch",
    ),
    "the step count not kept": (
        '        global_step = state["global_step"]  # the count travels in the checkpoint\n',
        "",
        "counted global_step from 0 again",
    ),
}


def learner_function(source: str):
    """Define ``my_resumable_loop`` as a notebook cell would (a module cloudpickle sends by value)."""
    namespace = {"__name__": "learner_cell"}
    exec(PRELUDE + source, namespace)
    return namespace["my_resumable_loop"]


# The weekly job runs each mistake for real (COURSE_ALL_MISTAKES=all; over a minute a fit on a slow day). At
# each push the answered lesson runs the published loop through the same crash-and-restore harness, and how
# the check reads every mistake's record is tests/unit/test_check_resumable.py's, from records built there.
@pytest.mark.skipif(
    not every_lesson("COURSE_ALL_MISTAKES"),
    reason="weekly, or COURSE_ALL_MISTAKES=all: each mistaken loop is a fit with a crash and a restart",
)
@pytest.mark.parametrize("mistake", list(MISTAKES))
def test_a_loop_that_does_not_resume_is_named(mistake, ray_session, storage):
    old, new, words = MISTAKES[mistake]
    assert old in SOLUTION, f"the solution no longer contains {old!r}: update the test"
    with pytest.raises(checks.ExerciseError) as caught:
        lesson04.check_resumable(learner_function(SOLUTION.replace(old, new, 1)))
    message = str(caught.value)
    assert words in message, message
    assert message.count("\n- ") == 1, f"only the one mistake is reported:\n{message}"
