"""Exercise checks: the placeholder is 'not attempted' (no failure), wrong answers fail in plain
words, and the published solutions pass their checks."""

import inspect
import pickle
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from ray.train import CheckpointConfig, FailureConfig, ScalingConfig

from course_utils.core import config
from course_utils.exercises import checks, lesson01, lesson02, lesson03, lesson04, lesson05, lesson06
from course_utils.exercises.checks import solutions_dir

SOLUTIONS = solutions_dir()
PROFILE = config.SMOKE


# Each check with the arguments its lesson passes; the placeholder must never fail.
HISTORY = pd.DataFrame({"epoch": [0, 1, 1, 2], "start_epoch": [0, 0, 1, 1]})
PLACEHOLDER_CALLS = {
    "01.1": lambda a: lesson01.check_steps_per_epoch(a, PROFILE.train_size, PROFILE.batch_size),
    "01.2": lesson01.check_safe_loader,
    "02.1": lesson02.check_per_worker_batch,
    "02.2": lambda a: lesson02.check_scaling_config(a, 4, 2),
    "03.1": lesson03.check_batch_transform,
    "04.1": lambda a: lesson04.check_failure_config(a, 2),
    "04.2": lambda a: lesson04.check_checkpoint_config(a, 3, "test_loss", "min"),
    "04.3": lambda a: lesson04.check_resume_epoch(a, HISTORY),
    "05.1": lesson05.check_accuracy_fn,
    "06.1": lesson06.check_inside,
    # the checks that run a learner's code for real: the placeholder returns before any argument is read
    "02.3": lesson02.check_migration,
    "03.2": lesson03.check_shard_counts,
    "04.4": lesson04.check_resumable,
    "05.2": lambda a: lesson05.check_batch_predictor(a, None, [], []),
}
LESSONS = (lesson01, lesson02, lesson03, lesson04, lesson05, lesson06)


def _exercises_checked() -> set[str]:
    """Every exercise id a lesson module's ``check_*`` function checks (its ``exercise`` default)."""
    found = set()
    for module in LESSONS:
        for name, fn in vars(module).items():
            if name.startswith("check_") and callable(fn) and fn.__module__ == module.__name__:
                found.add(inspect.signature(fn).parameters["exercise"].default)
    return found


def test_every_check_is_called_by_a_lesson():
    # The published solutions themselves are run by the lesson items (conftest.py): each lesson
    # executes with every solution pasted into its exercise cell, and each must print "correct".
    assert sorted(p.name[:2] for p in SOLUTIONS.glob("*.md")) == ["01", "02", "03", "04", "05", "06"]
    assert set(PLACEHOLDER_CALLS) == _exercises_checked()


@pytest.mark.parametrize("exercise", sorted(PLACEHOLDER_CALLS))
def test_placeholder_is_not_attempted_and_does_not_fail(exercise, capsys):
    assert PLACEHOLDER_CALLS[exercise](...) is None
    out = capsys.readouterr().out
    assert "not attempted yet" in out and f"notebooks/solutions/{exercise[:2]}_" in out


def _message(check, answer) -> str:
    with pytest.raises(checks.ExerciseError) as info:
        check(answer)
    return str(info.value)


def test_steps_per_epoch_explains_the_last_batch():
    message = _message(lambda a: lesson01.check_steps_per_epoch(a, 4000, 128), 31)
    assert "last, smaller batch" in message and "drop_last" in message
    assert "not it" in _message(lambda a: lesson01.check_steps_per_epoch(a, 4000, 128), 4000)
    assert "number of steps" in _message(lambda a: lesson01.check_steps_per_epoch(a, 4000, 128), "32")


def test_safe_loader_catches_code_running_loads():
    def unsafe(path):
        return torch.load(path, weights_only=False)

    message = _message(lesson01.check_safe_loader, unsafe)
    assert "ran code" in message and "weights_only=True" in message
    assert "state_dict" in _message(lesson01.check_safe_loader, lambda path: None)


def test_safe_loader_catches_a_loader_that_relies_on_the_default(capsys):
    # Safe on torch >= 2.6 by luck only: before 2.6 the default unpickled anything.
    message = _message(lesson01.check_safe_loader, lambda path: torch.load(path, map_location="cpu"))
    assert "PyTorch < 2.6" in message and "weights_only=True" in message
    lesson01.check_safe_loader(lambda path: torch.load(path, map_location="cpu", weights_only=True))
    assert "Exercise 01.2: correct" in capsys.readouterr().out


def test_safe_loader_catches_plain_pickle():
    def pickle_load(path):
        try:
            return torch.load(path, weights_only=True)
        except Exception:  # "falls back" to pickle: the classic mistake
            with open(path, "rb") as f:
                return pickle.load(f)

    assert "ran code" in _message(lesson01.check_safe_loader, pickle_load)


def test_per_worker_batch_messages():
    assert "should raise ValueError" in _message(
        lesson02.check_per_worker_batch, lambda g, w: g // w if w else 0
    )
    assert "each of 2 workers should get 64" in _message(lesson02.check_per_worker_batch, lambda g, w: g)
    assert "raised ZeroDivisionError" in _message(
        lesson02.check_per_worker_batch, lambda g, w: g // w if g % w == 0 else g / 0
    )


def test_scaling_config_messages():
    def check(c):
        return lesson02.check_scaling_config(c, 4, 2)

    assert "num_workers is 2" in _message(
        check, ScalingConfig(num_workers=2, resources_per_worker={"CPU": 2})
    )
    assert 'resources_per_worker={"CPU": 2}' in _message(check, ScalingConfig(num_workers=4))
    assert "ScalingConfig" in _message(check, {"num_workers": 4})


# Lesson 03's checks (03.1, 03.2): tests/unit/test_check_raydata.py, and for real in
# tests/integration/test_exercise_raydata.py.


def test_fault_tolerance_config_messages():
    assert "max_failures is 0" in _message(lambda c: lesson04.check_failure_config(c, 2), FailureConfig())
    message = _message(
        lambda c: lesson04.check_checkpoint_config(c, 3, "test_loss", "min"),
        CheckpointConfig(num_to_keep=3, checkpoint_score_attribute="test_loss", checkpoint_score_order="max"),
    )
    assert "lowest" in message and "'min'" in message
    assert "ranked by 'accuracy'" in _message(
        lambda c: lesson04.check_checkpoint_config(c, 3, "test_loss", "min"),
        CheckpointConfig(num_to_keep=3, checkpoint_score_attribute="accuracy"),
    )


def test_resume_epoch_messages():
    assert "next one" in _message(lambda a: lesson04.check_resume_epoch(a, HISTORY), 0)
    fresh = pd.DataFrame({"start_epoch": [0, 0]})
    assert "never resumed" in _message(lambda a: lesson04.check_resume_epoch(a, fresh), 1)


def test_accuracy_messages():
    message = _message(lesson05.check_accuracy_fn, lambda y, p: float(np.sum(y == p)))
    assert "returned 8.0, expected 1.0" in message and "share" in message
    assert "raise ValueError" in _message(
        lesson05.check_accuracy_fn, lambda y, p: sum(a == b for a, b in zip(y, p, strict=False)) / len(p)
    )


def test_inside_messages():
    def prefix(path, root):
        return str(path).startswith(str(root))

    def with_root(path, root):
        return Path(path).resolve().is_relative_to(Path(root))

    assert "the root itself" in _message(lesson06.check_inside, prefix)
    assert "the root itself" in _message(lesson06.check_inside, with_root)

    def no_root_but_prefix(path, root):
        return path != root and str(path).startswith(str(root))

    assert "climbs out" in _message(lesson06.check_inside, no_root_but_prefix)


def test_batch_predictor_mistakes_are_named_in_plain_words():
    import numpy as np

    labels = np.array([3, 1, 2])
    expected, confidence = np.array([3, 1, 7]), np.array([0.9, 0.8, 0.6])
    right = {"label": labels, "prediction": expected, "confidence": confidence}
    assert lesson05.predictor_problems(right, labels, expected, confidence) == []
    shuffled = {k: v[[2, 0, 1]] for k, v in right.items()}  # rows may come back in any order
    assert lesson05.predictor_problems(shuffled, labels, expected, confidence) == []
    assert (
        "logits"
        in lesson05.predictor_problems(
            {**right, "confidence": np.array([4.0, -1.0, 2.0])}, labels, expected, confidence
        )[0]
    )
    assert (
        "pass the batch's labels through"
        in lesson05.predictor_problems(
            {"prediction": expected, "confidence": confidence}, labels, expected, confidence
        )[0]
    )
    assert (
        "differ from the model's"
        in lesson05.predictor_problems(
            {**right, "prediction": np.array([3, 1, 2])}, labels, expected, confidence
        )[0]
    )
    assert (
        "softmax probability"
        in lesson05.predictor_problems(
            {**right, "confidence": np.array([0.5, 0.5, 0.5])}, labels, expected, confidence
        )[0]
    )
    assert "no rows" in lesson05.predictor_problems(None, labels, expected, confidence)[0]


def test_batch_predictor_must_be_a_class_with_call():
    def predictor(batch):
        return batch

    with pytest.raises(checks.ExerciseError, match="needs a class"):
        lesson05.check_batch_predictor(predictor, None, [], [])

    class NoCall:
        def __init__(self, model):
            pass

    with pytest.raises(checks.ExerciseError, match="needs a class"):
        lesson05.check_batch_predictor(NoCall, None, [], [])
