"""Lesson 02's migration check on recorded fits (no Ray): each classic mistake is named, alone.

``tests/integration/test_exercise_migration.py`` runs the check for real."""

from __future__ import annotations

import pytest

from course_utils.exercises import lesson02
from course_utils.exercises.harness import FitRecord

EPOCHS = 3
GLOBAL_BATCH = 128
LOSSES = (2.0, 1.0, 0.6)  # a learning run's epoch losses


def _events(
    *,
    reporting_ranks=(0, 1),
    checkpoint_ranks=(0,),
    set_epoch=True,
    batch=GLOBAL_BATCH // 2,
    losses=LOSSES,
) -> list[dict]:
    events = []
    for rank in (0, 1):
        events.append({"kind": "start", "rank": rank, "attempt": 1})
        for epoch in range(EPOCHS):
            if set_epoch:
                events.append({"kind": "set_epoch", "rank": rank, "attempt": 1, "epoch": epoch})
            events.append({"kind": "batches", "rank": rank, "attempt": 1, "sizes": [batch, batch]})
            if rank in reporting_ranks:
                events.append(
                    {
                        "kind": "report",
                        "rank": rank,
                        "attempt": 1,
                        "metrics": {"epoch": epoch, "train_loss": losses[epoch]},
                        "checkpoint": rank in checkpoint_ranks,
                    }
                )
    return events


def _problems(events: list[dict], error: BaseException | None = None) -> list[str]:
    return lesson02.migration_problems(FitRecord(error, None, EPOCHS, GLOBAL_BATCH, 2, events))


def test_the_published_loops_record_has_no_problems():
    assert _problems(_events()) == []


@pytest.mark.parametrize(
    ("events", "words"),
    [
        (_events(reporting_ranks=(0,)), "rank(s) 1 skipped ray.train.report"),
        (_events(checkpoint_ranks=(0, 1)), "ranks [0, 1] each attached a checkpoint"),
        (_events(set_epoch=False), "no loader.sampler.set_epoch(epoch) on rank(s) [0, 1]"),
        (_events(batch=GLOBAL_BATCH), "rank 0 trained on batches of 128"),
        (_events(losses=(2.3, 2.3, 2.3)), "the training loss did not fall"),
    ],
    ids=[
        "a rank skips report",
        "a checkpoint from every rank",
        "no set_epoch",
        "the global batch on every worker",
        "a loss that does not fall",
    ],
)
def test_each_mistake_is_named_alone(events, words):
    problems = _problems(events)
    assert len(problems) == 1, problems
    assert words in problems[0], problems[0]


def test_no_checkpoint_and_a_failed_fit_are_named():
    assert "no report carried a checkpoint" in _problems(_events(checkpoint_ranks=()))[0]
    failed = _problems(_events(), error=RuntimeError("CUDA out of memory"))
    assert len(failed) == 1 and failed[0].startswith("the fit failed:"), failed
