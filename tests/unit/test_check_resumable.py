"""Lesson 04's resumable-loop check on recorded fits (no Ray): each way of not resuming is named.

``tests/integration/test_exercise_resumable.py`` runs the check for real."""

from __future__ import annotations

import pytest

from course_utils import checks
from course_utils.fitcheck import FitRecord

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
    return "\n".join(checks.resumable_problems(record, CRASH_STEP))


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
    assert checks.check_resumable(...) is None
    assert 'checks.hint("04.4")' in capsys.readouterr().out
