"""Lesson 03's Ray Data exercises, checked for real on a local Ray: a transform that decodes the pixels
(another right answer to 03.1) passes in Ray Data, and a classic way of reading a shard wrong (03.2;
``SELECTED`` says which at each push), run on both shards of a ``streaming_split`` at once, fails with a
message that names it. That the published answers pass is the answered lesson's (conftest.py runs it and
requires "correct"); the transform's mistakes are caught before Ray runs (tests/unit/test_check_raydata.py)."""

import pytest

from course_utils.exercises import checks, lesson03
from maintainer_tools import fits
from maintainer_tools.harness.notebook_runs import at_each_push

pytestmark = pytest.mark.integration

TRANSFORM = checks.solutions("03")["03.1"]
COUNTER = checks.solutions("03")["03.2"]

# What a notebook could hold besides the shard: a dataset of the same rows (lesson 03 has `fast`, `train_ds`).
PRELUDE = """
from course_utils.lesson03 import raydata
from course_utils.exercises import checks, lesson03
notebook_ds = raydata.digits_dataset(*lesson03.exercise_digits()).map_batches(
    raydata.normalise_batch, batch_format="numpy", batch_size=None
)
"""

# mistake -> (exact text of the solution to change, its replacement, words the message must hold)
MISTAKES = {
    "loops over the shard": (
        "shard.iter_torch_batches(batch_size=64)",
        "shard",
        "looped over the shard itself",
    ),
    "a Dataset method on the shard": (
        "    counts = torch.zeros(10, dtype=torch.int64)\n",
        "    counts = torch.zeros(10, dtype=torch.int64) + 0 * shard.count()\n",
        "not a Dataset",
    ),
    "row by row": (
        'for batch in shard.iter_torch_batches(batch_size=64):\n        counts += torch.bincount(batch["label"], minlength=10)',
        'for row in shard.iter_rows():\n        counts[row["label"]] += 1',
        "row by row",
    ),
    "numpy batches": (
        'shard.iter_torch_batches(batch_size=64):\n        counts += torch.bincount(batch["label"], minlength=10)',
        'shard.iter_batches(batch_size=64):\n        counts += torch.bincount(torch.as_tensor(batch["label"]), minlength=10)',
        "numpy batches",
    ),
    "counts a notebook dataset": (
        "shard.iter_torch_batches",
        "notebook_ds.iter_torch_batches",
        "never read the shard",
    ),
    "stops after the first batch": (
        "minlength=10)\n",
        "minlength=10)\n        break\n",
        "no break after the first",
    ),
}


def learner_function(source: str, name: str, prelude: str = ""):
    """Define the learner's function as a notebook cell would (a module cloudpickle sends by value)."""
    namespace = {"__name__": "learner_cell"}
    exec(prelude + source, namespace)
    return namespace[name]


@pytest.fixture(scope="module", autouse=True)
def _data_context(ray_session):
    fits.configure_data_context()  # as lesson 03 sets it


def test_a_transform_that_decodes_the_pixels_also_passes_in_ray_data(capsys):
    decoded = TRANSFORM.replace(
        '"image": batch["image"][keep]',
        '"image": np.frombuffer(b"".join(batch["image"][keep]), dtype=np.uint8).reshape(-1, 28, 28)',
    )
    assert decoded != TRANSFORM
    lesson03.check_batch_transform(learner_function(decoded, "my_transform"))
    assert "Exercise 03.1: correct" in capsys.readouterr().out


# Each push runs one mistake for real: looping over the shard itself, which only a real DataIterator tells
# apart from its batches. How the check reads every mistake's result is tests/unit/test_check_raydata.py's;
# COURSE_ALL_MISTAKES=all runs each one on Ray Data (the weekly job does: a Ray release can move any).
SELECTED = at_each_push("COURSE_ALL_MISTAKES", list(MISTAKES), lambda m: m == "loops over the shard")


@pytest.mark.parametrize("mistake", SELECTED)
def test_each_shard_mistake_is_named(mistake):
    old, new, words = MISTAKES[mistake]
    assert old in COUNTER, f"the solution no longer contains {old!r}: update the test"
    wrong = learner_function(COUNTER.replace(old, new, 1), "count_digits", PRELUDE)
    with pytest.raises(checks.ExerciseError) as caught:
        lesson03.check_shard_counts(wrong)
    message = str(caught.value)
    assert words in message, message
    assert message.count("\n- ") == 1, f"only the one mistake is reported:\n{message}"
