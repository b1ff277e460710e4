"""Exercises of lesson 02: the per-worker batch, a ScalingConfig, and the migration (run for real)."""

from __future__ import annotations

from typing import Any

from course_utils.exercises import harness
from course_utils.exercises.checks import correct, not_attempted, ran_but, wrong
from course_utils.exercises.harness import failure_summary


def check_per_worker_batch(split: Any, exercise: str = "02.1") -> None:
    """``split(global_batch, workers)`` divides evenly or raises ``ValueError``."""
    if not_attempted(exercise, split):
        return None
    if not callable(split):
        raise wrong(exercise, "the answer should be a function split(global_batch, workers).")
    for global_batch, workers, expected in ((128, 2, 64), (128, 4, 32), (256, 1, 256), (96, 3, 32)):
        got = split(global_batch, workers)
        if got != expected:
            raise wrong(
                exercise,
                f"split({global_batch}, {workers}) returned {got!r}; each of {workers} workers should get "
                f"{expected} so that together they still train on {global_batch} images per step.",
            )
    for global_batch, workers in ((100, 3), (128, 0)):
        try:
            got = split(global_batch, workers)
        except ValueError:
            continue
        except Exception as exc:
            raise wrong(
                exercise,
                f"split({global_batch}, {workers}) raised {type(exc).__name__}; raise a ValueError that says "
                "why instead.",
            ) from exc
        raise wrong(
            exercise,
            f"split({global_batch}, {workers}) returned {got!r}; it cannot split evenly, so it should raise "
            "ValueError (otherwise workers train on different batch sizes).",
        )
    return correct(exercise, "even splits come out right and impossible ones raise ValueError.")


def check_scaling_config(
    config: Any, num_workers: int, cpus_per_worker: float, use_gpu: bool = False, exercise: str = "02.2"
) -> None:
    """A ``ScalingConfig`` asking for ``num_workers`` workers with ``cpus_per_worker`` CPUs each."""
    from ray.train import ScalingConfig

    if not_attempted(exercise, config):
        return None
    if not isinstance(config, ScalingConfig):
        raise wrong(exercise, f"the answer should be a ray.train.ScalingConfig, got {type(config).__name__}.")
    if config.num_workers != num_workers:
        raise wrong(exercise, f"num_workers is {config.num_workers}; the task asks for {num_workers}.")
    if bool(config.use_gpu) != use_gpu:
        raise wrong(exercise, f"use_gpu is {config.use_gpu}; the task asks for {use_gpu}.")
    cpus = (config.resources_per_worker or {}).get("CPU", 1)
    if cpus != cpus_per_worker:
        raise wrong(
            exercise,
            f"each worker gets {cpus:g} CPU; ask for {cpus_per_worker:g} with "
            f'resources_per_worker={{"CPU": {cpus_per_worker:g}}}.',
        )
    return correct(
        exercise,
        f"{num_workers} workers x {cpus_per_worker:g} CPU = {num_workers * cpus_per_worker:g} CPU slots.",
    )


# A working loop's last-epoch loss is well under this share of its first epoch's (3 epochs, 512
# digits); a loop that does not learn stays near 1.0, give or take the shuffle.
LOSS_DROP = 0.8


def migration_problems(record: Any) -> list[str]:
    """What a checked fit of a lesson 02 per-worker function did wrong, in plain words (empty: right)."""

    ranks = range(record.num_workers)
    counts = {rank: len(record.reports(rank)) for rank in ranks}
    problems: list[str] = []
    if len(set(counts.values())) > 1 or (record.error is not None and "have not joined" in str(record.error)):
        few = [rank for rank in ranks if counts[rank] < max(counts.values())]
        return [  # the run stopped at that barrier: nothing after it says anything
            f"rank(s) {', '.join(map(str, few)) or '?'} skipped ray.train.report "
            f"(reports per rank: {counts}). report is a barrier: every rank must call it every epoch, "
            "or the others wait for ever; keep it outside any `if rank == 0:`."
        ]
    if record.error is not None:
        return [f"the fit failed: {failure_summary(record.error)}. Fix that first (the full error is above)."]
    if counts[0] != record.epochs:
        problems.append(
            f"rank 0 called ray.train.report {counts[0]} time(s) in {record.epochs} epochs: report once "
            "at the end of every epoch."
        )
    with_checkpoint = sorted({r["rank"] for r in record.of("report") if r["checkpoint"]})
    if len(with_checkpoint) > 1:
        problems.append(
            f"ranks {with_checkpoint} each attached a checkpoint. All ranks hold the same weights after "
            "DDP's all-reduce, so only rank 0 should write one (checkpoint=None on the others)."
        )
    elif not with_checkpoint and counts[0]:
        problems.append(
            "no report carried a checkpoint: rank 0 should pass checkpoint=ray.train.Checkpoint.from_directory(...) "
            "(saved with torch.save into a temporary directory, as section 02's loop does), or the run cannot "
            "resume and has no model to load."
        )
    if record.num_workers > 1:
        missing = [rank for rank in ranks if record.set_epochs(rank) != list(range(record.epochs))]
        if missing:
            problems.append(
                f"no loader.sampler.set_epoch(epoch) on rank(s) {missing} (called with "
                f"{record.set_epochs(missing[0])}): without it every epoch shuffles the same way."
            )
    expected = record.global_batch // record.num_workers
    too_big = {rank: max(record.batch_sizes(rank)) for rank in ranks if record.batch_sizes(rank)}
    too_big = {rank: size for rank, size in too_big.items() if size != expected}
    if too_big:
        rank, size = next(iter(too_big.items()))
        problems.append(
            f"rank {rank} trained on batches of {size}; with a global batch of {record.global_batch} on "
            f"{record.num_workers} workers each worker takes {expected} "
            '(per_worker_batch(config["batch_size"], world_size)), so together they still train on '
            f"{record.global_batch} images per step."
        )
    losses = record.losses(0)
    if counts[0] and not losses:
        problems.append(
            'the reported metrics have no "train_loss": report {"epoch": epoch, "train_loss": ...}.'
        )
    elif len(losses) >= 2 and not losses[-1] < LOSS_DROP * losses[0]:
        problems.append(
            f"the training loss did not fall ({losses[0]:.3f} in epoch 0, {losses[-1]:.3f} in the last; "
            f"a working loop gets below {LOSS_DROP:.0%} of the first epoch's): "
            "is the optimizer built on the prepared model's parameters, with the lesson's learning rate?"
        )
    return problems


def check_migration(train_fn: Any, exercise: str = "02.3") -> None:
    """Run the learner's per-worker function for real (2 workers, 512 digits, 3 epochs) and say
    what is wrong: a rank skipping report, checkpoints from every rank, no set_epoch, the
    wrong per-worker batch, a loss that does not fall."""

    if not_attempted(exercise, train_fn):
        return None
    if not callable(train_fn):
        raise wrong(exercise, "the answer should be a function my_train_loop(config).")
    print(f"Exercise {exercise}: training your function on 2 workers for 3 short epochs...")
    record = harness.fit_learner_function(train_fn, f"exercise-{exercise.replace('.', '-')}")
    problems = migration_problems(record)
    if problems:
        raise ran_but(exercise, problems)
    losses = record.losses(0)
    return correct(
        exercise,
        f"both ranks reported every epoch, rank 0 alone checkpointed, set_epoch ran each epoch, each "
        f"worker trained on batches of {record.global_batch // record.num_workers}, and the loss fell "
        f"from {losses[0]:.3f} to {losses[-1]:.3f} (the check's fit took {record.seconds:.0f} s).",
    )
