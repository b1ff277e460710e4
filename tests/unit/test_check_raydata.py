"""Lesson 03's Ray Data exercises without Ray: the transform's mistakes (03.1), caught on hand-made
numpy batches before anything runs in Ray Data, and the shard counter's (03.2), named from what its
runs on two shards returned. ``tests/integration/test_exercise_raydata.py`` runs both checks for real."""

from __future__ import annotations

import numpy as np
import pytest

from course_utils.exercises import checks, lesson03

TRANSFORM = checks.solutions("03")["03.1"]


def learner_function(source: str, name: str):
    """Define the learner's function as a notebook cell would."""
    namespace = {"__name__": "learner_cell"}
    exec(source, namespace)
    return namespace[name]


def test_placeholders_are_not_attempted(capsys):
    assert lesson03.check_batch_transform(...) is None
    assert lesson03.check_shard_counts(...) is None
    out = capsys.readouterr().out
    assert 'checks.hint("03.1")' in out and 'checks.hint("03.2")' in out


def test_a_class_or_a_value_is_not_a_function():
    class Transform:
        def __call__(self, batch):
            return batch

    with pytest.raises(checks.ExerciseError, match="should be a function"):
        lesson03.check_batch_transform(Transform)
    with pytest.raises(checks.ExerciseError, match="should be a function"):
        lesson03.check_shard_counts([0] * 10)


def test_the_published_transform_has_no_problem_on_numpy_batches():
    assert lesson03.transform_problems(learner_function(TRANSFORM, "my_transform")) == []


# mistake -> (exact text of the solution to change, its replacement, words the message must hold)
TRANSFORM_MISTAKES = {
    "no filter": ('batch["image"][keep]', 'batch["image"]', "different lengths"),
    "no filter at all": (
        'batch["image"][keep],  # the same mask on every column\n        "label": (batch["label"][keep]',
        'batch["image"],\n        "label": (batch["label"]',
        "only 6 of them are a 3 or an 8",
    ),
    "labels not relabelled": (
        '(batch["label"][keep] == 8).astype(np.int64)',
        'batch["label"][keep]',
        "still 3 and 8",
    ),
    "labels swapped": ('(batch["label"][keep] == 8)', '(batch["label"][keep] == 3)', "swapped"),
    "boolean labels": (
        '(batch["label"][keep] == 8).astype(np.int64)',
        '(batch["label"][keep] == 8)',
        "are bool",
    ),
    "an extra column": ("    return {\n", '    return {\n        "keep": keep[keep],\n', "return exactly"),
    "images normalised": (
        '"image": batch["image"][keep]',
        '"image": np.frombuffer(b"".join(batch["image"][keep]), dtype=np.uint8).reshape(-1, 784) / 255.0',
        "leave the image column as it is",
    ),
}


@pytest.mark.parametrize("mistake", list(TRANSFORM_MISTAKES))
def test_each_transform_mistake_is_named_before_ray_runs(mistake):
    old, new, words = TRANSFORM_MISTAKES[mistake]
    assert old in TRANSFORM, f"the solution no longer contains {old!r}: update the test"
    wrong = learner_function(TRANSFORM.replace(old, new, 1), "my_transform")
    with pytest.raises(checks.ExerciseError) as caught:
        lesson03.check_batch_transform(wrong)  # fails on the numpy batches: no Ray started
    message = str(caught.value)
    assert words in message, message
    assert message.startswith("Exercise 03.1: your function ran, but\n- ") and message.count("\n- ") == 1


def test_a_row_by_row_transform_fails_on_a_batch_without_a_3_or_an_8():
    def per_row(batch):
        rows = [
            (image, int(label == 8))
            for image, label in zip(batch["image"], batch["label"], strict=True)
            if label in (3, 8)
        ]
        return {"image": np.stack([r[0] for r in rows]), "label": np.array([r[1] for r in rows])}

    (problem,) = lesson03.transform_problems(per_row)
    assert "no 3 and no 8 it raised ValueError" in problem and "empty columns" in problem


def test_a_transform_that_decodes_the_pixels_is_also_right():
    def decoded(batch):
        keep = np.isin(batch["label"], (3, 8))
        pixels = np.frombuffer(b"".join(batch["image"][keep]), dtype=np.uint8).reshape(-1, 28, 28)
        return {"image": pixels, "label": (batch["label"][keep] == 8).astype(np.int64)}

    assert lesson03.transform_problems(decoded) == []


def test_returning_no_dict_is_named():
    (problem,) = lesson03.transform_problems(lambda batch: None)
    assert "returned a NoneType" in problem and "dict of numpy columns" in problem


# ------------------------------------------------------------------------------ exercise 03.2

TRUTH = np.array([30, 50, 40, 44, 36, 38, 42, 34, 48, 38])  # 400 rows
SHARD_ROWS = 200
SHARD_0 = np.array([15, 25, 20, 22, 18, 19, 21, 17, 24, 19])
SHARD_1 = TRUTH - SHARD_0


def _run(result=None, *, called=("iter_torch_batches",), error=None, finished=True):
    return {"finished": finished, "error": error, "result": result, "called": list(called)}


def _problem(runs) -> str:
    problems = lesson03.shard_problems(runs, SHARD_ROWS, TRUTH)
    assert len(problems) == 1, problems
    return problems[0]


def test_the_right_counts_have_no_problem_in_any_form():
    import torch

    assert SHARD_0.sum() == SHARD_1.sum() == SHARD_ROWS
    for first, second in [
        (torch.tensor(SHARD_0), torch.tensor(SHARD_1)),
        (SHARD_0.tolist(), SHARD_1),
        (dict(enumerate(SHARD_0.tolist())), {d: int(n) for d, n in enumerate(SHARD_1) if n}),
    ]:
        assert lesson03.shard_problems([_run(first), _run(second)], SHARD_ROWS, TRUTH) == []


def test_each_shard_mistake_is_named():
    not_iterable = TypeError("'_WatchedShard' object is not iterable")
    assert "looped over the shard itself" in _problem([_run(error=not_iterable, called=())] * 2)
    no_count = AttributeError("'StreamSplitDataIterator' object has no attribute 'count'")
    assert "not a Dataset" in _problem([_run(error=no_count, called=())] * 2)
    assert "raised KeyError: 'labels'" in _problem([_run(error=KeyError("labels"))] * 2)
    assert "never read the shard" in _problem([_run(TRUTH, called=()), _run(TRUTH, called=())])
    assert "row by row" in _problem(
        [_run(SHARD_0, called=["iter_rows"]), _run(SHARD_1, called=["iter_rows"])]
    )
    assert "numpy batches" in _problem(
        [_run(SHARD_0, called=["iter_batches"]), _run(SHARD_1, called=["iter_batches"])]
    )
    assert "return 10 counts" in _problem([_run(SHARD_ROWS), _run(SHARD_ROWS)])
    assert "no break after the first" in _problem([_run(SHARD_0 // 3), _run(SHARD_1 // 3)])
    assert "count each row once" in _problem([_run(SHARD_0 * 2), _run(SHARD_1 * 2)])
    assert "count the values of batch['label']" in _problem([_run(SHARD_1), _run(SHARD_1[::-1])])
    assert f"within {lesson03.SHARD_TIMEOUT_S} s" in _problem([_run(SHARD_0), _run(finished=False)])
    # One call raised and the other waits at the split for ever: the error is what to fix.
    assert "raised KeyError" in _problem([_run(error=KeyError("labels")), _run(finished=False)])


def test_the_exercise_data_has_ten_different_digit_counts():
    images, labels = lesson03.exercise_digits()
    counts = np.bincount(labels, minlength=10)
    assert images.shape == (lesson03.EXERCISE_ROWS, 28, 28) and images.dtype == np.uint8
    assert counts.sum() == lesson03.EXERCISE_ROWS and len(set(counts.tolist())) == 10
    assert lesson03.EXERCISE_ROWS % 2 == 0  # streaming_split(2, equal=True) then drops no row
