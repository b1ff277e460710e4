"""Lesson 02's migration exercise, checked for real: a classic mistake, made in the published
solution, fails with a message that names it (each push runs one; ``SELECTED`` says which). That the
solution itself passes is the answered lesson's (conftest.py runs it and requires "correct")."""

import re

import pytest

from course_utils.exercises import checks, lesson02
from maintainer_tools.harness.notebook_runs import at_each_push

pytestmark = pytest.mark.integration

# What the exercise cell has imported when the learner's function is defined (lesson 02).
PRELUDE = """
import os
import tempfile

import ray
import ray.train
import ray.train.torch
import torch
from course_utils.core import checkpoints, data
from course_utils.core.model import build_resnet18
from course_utils.core.plan import per_worker_batch
from course_utils.core.steps import train_one_epoch
"""

SOLUTION = re.search(r"```python\n(.*?)```", checks.solution_text("02.3"), re.S).group(1)

# mistake -> (exact text of the solution to change, its replacement, words the message must hold)
MISTAKES = {
    "a rank skips report": (
        "            ray.train.report(",
        "            if rank == 0:\n                ray.train.report(",
        "skipped ray.train.report",
    ),
    "a checkpoint from every rank": (
        "            if rank == 0:",
        "            if True:",
        "each attached a checkpoint",
    ),
    "no set_epoch": ("            loader.sampler.set_epoch(epoch)", "            pass", "set_epoch"),
    "the global batch on every worker": (
        'per_worker_batch(config["batch_size"], world)',
        'config["batch_size"]',
        "trained on batches of 64",
    ),
    "a loss that does not fall": ('lr=config["lr"]', "lr=0.0", "loss did not fall"),
}

# Each push runs one mistake for real: a rank that skips report, the one that ends the fit in Ray's
# collective timeout rather than in a finished run (the published solution's finished run is the answered
# lesson's). How the check reads every mistake's record is tests/unit/test_check_migration.py's, from
# records built there. COURSE_ALL_MISTAKES=all runs each one for real (about a minute a fit here).
SELECTED = at_each_push("COURSE_ALL_MISTAKES", list(MISTAKES), lambda m: m == "a rank skips report")


def learner_function(source: str):
    """Define ``my_train_loop`` as a notebook cell would (a module cloudpickle sends by value)."""
    namespace = {"__name__": "learner_cell"}
    exec(PRELUDE + source, namespace)
    return namespace["my_train_loop"]


def test_placeholder_is_not_attempted(capsys):
    assert lesson02.check_migration(...) is None
    assert 'checks.hint("02.3")' in capsys.readouterr().out


@pytest.mark.parametrize("mistake", SELECTED)
def test_each_mistake_is_named(mistake, ray_session, storage):
    old, new, words = MISTAKES[mistake]
    assert old in SOLUTION, f"the solution no longer contains {old!r}: update the test"
    wrong = learner_function(SOLUTION.replace(old, new, 1))
    with pytest.raises(checks.ExerciseError) as caught:
        lesson02.check_migration(wrong)
    message = str(caught.value)
    assert words in message, message
    assert message.count("\n- ") == 1, f"only the one mistake is reported:\n{message}"
