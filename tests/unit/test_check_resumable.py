"""Lesson 04's resumable-loop check on recorded fits (no Ray): each way of not resuming is named.

``tests/integration/test_exercise_resumable.py`` runs the check for real."""

from __future__ import annotations

import pytest

from course_utils.exercises import lesson04
from course_utils.exercises.harness import FitRecord

CRASH_STEP = 10  # 8 steps an epoch: rank 1's second step of epoch 1
LOSSES = {0: 2.0, 1: 1.0, 2: 0.6}  # a learning run's epoch losses


def _attempt(attempt: int, epochs: list[int], *, losses=LOSSES, checkpoint=True, crash=False) -> list[dict]:
    events = []
    for rank in (0, 1):
        events.append({"kind": "start", "rank": rank, "attempt": attempt})
        steps = 0
        for epoch in epochs:
            events.append({"kind": "set_epoch", "rank": rank, "attempt": attempt, "epoch": epoch})
            if crash and epoch == 1:
                steps += 2
                break
            steps += 8
            events.append(
                {
                    "kind": "report",
                    "rank": rank,
                    "attempt": attempt,
                    "metrics": {"epoch": epoch, "train_loss": losses[epoch]},
                    "checkpoint": checkpoint and rank == 0,
                    "steps": steps,
                }
            )
        events.append({"kind": "end", "rank": rank, "attempt": attempt, "steps": steps})
    return events


def _record(*attempts: list[dict], error: BaseException | None = None) -> FitRecord:
    return FitRecord(error, None, 3, 64, 2, [e for events in attempts for e in events])


def _problems(record: FitRecord) -> str:
    return "\n".join(lesson04.resumable_problems(record, CRASH_STEP))


def test_a_resumed_run_has_no_problems():
    record = _record(_attempt(1, [0, 1, 2], crash=True), _attempt(2, [1, 2]))
    assert _problems(record) == ""


@pytest.mark.parametrize(
    ("second", "words"),
    [
        (_attempt(2, [0, 1, 2]), "ignores ray.train.get_checkpoint()"),
        (_attempt(2, [0, 1, 2], losses={0: 1.0, 1: 0.6, 2: 0.5}), "restored the weights but not the epoch"),
        (_attempt(2, [1, 2], losses={1: 2.0, 2: 1.2}), "with fresh weights"),
        (_attempt(2, [2]), "attempt 2 started at epoch 2"),
    ],
    ids=["ignores the checkpoint", "weights not epoch", "epoch not weights", "skips an epoch"],
)
def test_each_way_of_not_resuming_is_named(second, words):
    assert words in _problems(_record(_attempt(1, [0, 1, 2], crash=True), second))


def test_no_checkpoint_is_named():
    record = _record(_attempt(1, [0, 1, 2], crash=True, checkpoint=False), _attempt(2, [0, 1, 2]))
    assert "no checkpoint was ever reported" in _problems(record)


def test_a_failing_restore_and_a_crash_that_never_came_are_named():
    failed = _record(_attempt(1, [0, 1, 2], crash=True), [], error=KeyError("optimizer"))
    assert "attempt 2 (after the check's crash) failed" in _problems(failed)
    short = _record(_attempt(1, [0]))
    assert "never came" in _problems(short)


def test_placeholder_is_not_attempted(capsys):
    assert lesson04.check_resumable(...) is None
    assert 'checks.hint("04.4")' in capsys.readouterr().out


def _with_steps(events: list[dict], count) -> list[dict]:
    """The same events, each report carrying global_step = count(epoch, attempt)."""
    for e in events:
        if e["kind"] == "report":
            e["metrics"] = {**e["metrics"], "global_step": count(e["metrics"]["epoch"], e["attempt"])}
    return events


def test_global_step_counted_across_the_restart_has_no_problems():
    whole_run = lambda epoch, attempt: 8 * (epoch + 1)  # noqa: E731
    record = _record(
        _with_steps(_attempt(1, [0, 1, 2], crash=True), whole_run),
        _with_steps(_attempt(2, [1, 2]), whole_run),
    )
    assert lesson04.global_step_problems(record, 8) == []


@pytest.mark.parametrize(
    ("count", "words"),
    [
        (None, "has no 'global_step'"),
        (
            lambda epoch, attempt: 8 * (epoch + 1) if attempt == 1 else 8 * epoch,
            "counted global_step from 0 again",
        ),
        (lambda epoch, attempt: epoch + 1, "add len(loader) after each epoch"),
    ],
    ids=["not reported", "not kept in the checkpoint", "counts epochs, not steps"],
)
def test_each_wrong_global_step_is_named(count, words):
    first, second = _attempt(1, [0, 1, 2], crash=True), _attempt(2, [1, 2])
    if count is not None:
        first, second = _with_steps(first, count), _with_steps(second, count)
    assert words in "\n".join(lesson04.global_step_problems(_record(first, second), 8))
