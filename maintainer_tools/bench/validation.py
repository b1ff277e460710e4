"""``python -m maintainer_tools.bench validation``: epoch time when every rank scores the whole test
set vs the course's choice, each rank scoring its share (lesson 02's loop: ``RANK_SHARE``).

Two runs of lesson 02's loop (``lesson_code.train_loop_per_worker``), one after the other in this
process: as the lesson runs it, and with every rank given the whole test set
(``train_loop_every_rank_scores_all``, made here so that the loop the lesson shows carries no
benchmark switch). An epoch is its training plus its evaluation: the training seconds are the
median ``epoch_time_s`` over both runs (the same loop: one figure keeps run-to-run noise out),
plus each run's median ``eval_s`` (epochs after the first); the ratios are every-rank / sharded.
Accuracy is printed for both: scoring each digit once changes no figure beyond the ranks'
slightly different BatchNorm statistics.
"""

from __future__ import annotations

import argparse
import inspect
import statistics
from collections.abc import Callable, Sequence

from course_utils import lesson_code
from course_utils.core import data, session, steps, storage, training
from course_utils.core.config import get_profile
from course_utils.core.history import metric_history
from course_utils.core.storage import resolve as resolve_storage
from maintainer_tools.bench.common import print_lines

# How lesson 02's loop gives each rank its share of the test digits; the every-rank variant scores them all.
RANK_SHARE = "Subset(test_ds, range(rank, len(test_ds), world))"


def train_loop_every_rank_scores_all() -> Callable[[dict], None]:
    """Lesson 02's ``train_loop_per_worker`` with one edit, as a learner would make it in the cell: every rank
    scores the whole test set (the cost the loop's ``RANK_SHARE`` avoids). Made from the loop's own source,
    so that the loop the lesson shows carries no benchmark switch; fails when the loop no longer has that line."""
    source = inspect.getsource(lesson_code.train_loop_per_worker)
    if RANK_SHARE not in source:
        raise SystemExit(
            f"lesson 02's loop no longer shards the test digits with {RANK_SHARE}: update this bench"
        )
    # a module name of its own, so that Ray pickles the variant by value, not by reference to lesson_code
    namespace = {**vars(lesson_code), "__name__": "bench_validation_every_rank"}
    exec(source.replace(RANK_SHARE, "test_ds"), namespace)
    return namespace["train_loop_per_worker"]


def main(argv: Sequence[str] | None = None) -> dict[str, float]:
    """Every rank evaluating vs sharded evaluation: epoch seconds and their ratio, one process run."""
    parser = argparse.ArgumentParser(
        prog="python -m maintainer_tools.bench validation", description=(main.__doc__ or "").split("\n")[0]
    )
    parser.add_argument("--train-size", type=int, default=2000)
    parser.add_argument("--test-size", type=int, default=1000)
    parser.add_argument("--epochs", type=int, default=3)
    args = parser.parse_args(argv)

    data.ensure_mnist(verbose=False)
    session.start_ray(verbose=False, include_dashboard=False)
    profile = get_profile().with_(train_size=args.train_size, test_size=args.test_size, epochs=args.epochs)
    out: dict[str, float] = {"train_size": args.train_size, "test_size": args.test_size}
    runs = {}
    for label, shard in (("every_rank", False), ("sharded", True)):
        name = f"bench-validation-{label}"
        storage.resolve().reset_run(name)
        try:
            loop = lesson_code.train_loop_per_worker if shard else train_loop_every_rank_scores_all()
            trainer = training.make_trainer(
                name,
                profile,
                store=resolve_storage(),
                train_loop=loop,
                reported_metrics=steps.REPORTED_METRICS,
            )
            rows = metric_history(trainer.fit())
        finally:
            storage.resolve().reset_run(name)
        runs[label] = rows.iloc[1:] if len(rows) > 1 else rows  # epoch 0 pays for warm-up
        out[f"{label}_final_accuracy"] = float(rows["accuracy"].iloc[-1])
    # The training part is the same loop in both runs: its median over both runs keeps the runs' noise
    # (seconds, on a shared machine) out of a difference that is only the evaluation.
    train_s = statistics.median([s for rows in runs.values() for s in rows["epoch_time_s"]])
    out["epoch_training_s"] = train_s
    for label, rows in runs.items():
        out[f"{label}_eval_s"] = statistics.median(rows["eval_s"])
        out[f"{label}_epoch_s"] = train_s + out[f"{label}_eval_s"]
    out["every_rank_over_sharded_eval_ratio"] = out["every_rank_eval_s"] / out["sharded_eval_s"]
    out["every_rank_over_sharded_epoch_ratio"] = out["every_rank_epoch_s"] / out["sharded_epoch_s"]
    print_lines(out)
    return out
