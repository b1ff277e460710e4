"""Exercises of lesson 04: FailureConfig, CheckpointConfig, the resumed epoch, and a resumable loop
(run for real, with a crash)."""

from __future__ import annotations

from typing import Any

from course_utils.core import checkpoints
from course_utils.exercises import harness
from course_utils.exercises.checks import correct, not_attempted, ran_but, wrong
from course_utils.exercises.harness import failure_summary


def check_failure_config(config: Any, max_failures: int, exercise: str = "04.1") -> None:
    """A ``FailureConfig`` that retries ``max_failures`` times."""
    from ray.train import FailureConfig

    if not_attempted(exercise, config):
        return None
    if not isinstance(config, FailureConfig):
        raise wrong(exercise, f"the answer should be a ray.train.FailureConfig, got {type(config).__name__}.")
    if config.max_failures != max_failures:
        raise wrong(
            exercise,
            f"max_failures is {config.max_failures}; the task allows {max_failures} retries "
            "(-1 would retry for ever, 0 never).",
        )
    return correct(
        exercise, f"the run survives {max_failures} failures, restarting from the latest checkpoint."
    )


def check_checkpoint_config(
    config: Any, num_to_keep: int, attribute: str, order: str, exercise: str = "04.2"
) -> None:
    """A ``CheckpointConfig`` keeping the ``num_to_keep`` best checkpoints by ``attribute``."""
    from ray.train import CheckpointConfig

    if not_attempted(exercise, config):
        return None
    if not isinstance(config, CheckpointConfig):
        raise wrong(
            exercise, f"the answer should be a ray.train.CheckpointConfig, got {type(config).__name__}."
        )
    if config.num_to_keep != num_to_keep:
        raise wrong(exercise, f"num_to_keep is {config.num_to_keep}; keep {num_to_keep}.")
    if config.checkpoint_score_attribute != attribute:
        raise wrong(
            exercise,
            f"checkpoints are ranked by {config.checkpoint_score_attribute!r}; rank them by {attribute!r}.",
        )
    if config.checkpoint_score_order != order:
        raise wrong(
            exercise,
            f"checkpoint_score_order is {config.checkpoint_score_order!r}: for {attribute!r} the best is the "
            f"{'lowest' if order == 'min' else 'highest'}, so use {order!r}.",
        )
    return correct(exercise, f"Ray keeps the {num_to_keep} checkpoints with the {order} {attribute}.")


def check_resume_epoch(answer: Any, history: Any, exercise: str = "04.3") -> None:
    """The epoch a resumed attempt started at, read from a run's metric history (``start_epoch``)."""
    if not_attempted(exercise, answer):
        return None
    starts = sorted({int(s) for s in history["start_epoch"]})
    resumed = [s for s in starts if s > 0]
    if not resumed:
        raise wrong(
            exercise, "this run never resumed (every epoch has start_epoch 0): pick a run that failed."
        )
    expected = resumed[-1]
    if answer != expected:
        hint = (
            " (that is the epoch that was saved; training continues at the next one)"
            if answer == expected - 1
            else ""
        )
        raise wrong(
            exercise, f"{answer!r} is not where the last attempt started{hint}; look at 'start_epoch'."
        )
    return correct(
        exercise,
        f"the last attempt restored epoch {expected - 1}'s checkpoint and trained from epoch {expected}.",
    )


# A resumed attempt's first epoch trains on the checkpoint's weights: its loss is well under this
# share of the fresh start's epoch-0 loss (3 epochs, 512 digits); fresh weights stay near 1.0.
RESUMED_LOSS = 0.85


def _first_epoch(record: Any, attempt: int) -> int | None:
    """The epoch rank 0 started ``attempt`` at: its first set_epoch, else its first report's epoch."""
    set_epochs = record.set_epochs(0, attempt)
    if set_epochs:
        return set_epochs[0]
    reports = record.reports(0, attempt)
    if reports and "epoch" in reports[0]["metrics"]:
        return int(reports[0]["metrics"]["epoch"])
    return record.epochs - len(reports) if reports else None


def _final_history(record: Any) -> list[int] | None:
    """The epochs in the history of the run's last checkpoint, when it is a course checkpoint."""

    checkpoint = getattr(record.result, "checkpoint", None)
    if checkpoint is None:
        return None
    try:
        history = checkpoints.load_state(checkpoint).get("history")
        return [int(row["epoch"]) for row in history] if isinstance(history, list) else None
    except Exception:  # the learner's own format: the reports are checked instead
        return None


def resumable_problems(record: Any, crash_step: int) -> list[str]:
    """What a checked, crashed fit of a lesson 04 resumable function did wrong (empty: right)."""

    crashed = any(e["steps"] >= crash_step for e in record.of("end", 1, 1))
    if not crashed:
        if record.error is not None:
            return [
                f"the fit failed before the check's crash: {failure_summary(record.error)}. Fix that first."
            ]
        steps = max((e["steps"] for e in record.of("end", 1, 1)), default=0)
        return [
            f"rank 1 took only {steps} optimizer steps in {record.epochs} epochs, so the check's crash (at its "
            f"step {crash_step}, early in epoch 1) never came: train every epoch, on worker.batch-sized batches."
        ]
    saved = [r for r in record.of("report", attempt=1) if r["checkpoint"]]
    if not saved:
        return [
            "no checkpoint was ever reported before the crash, so there was nothing to resume from: attach one "
            "at the end of every epoch, as section 03's loop does (rank 0 saves its state into a temporary "
            "directory and reports ray.train.Checkpoint.from_directory(directory))."
        ]
    saved_epoch = int(saved[-1]["metrics"].get("epoch", len(record.reports(0, 1)) - 1))
    expected = saved_epoch + 1
    if record.error is not None:
        return [
            f"attempt 2 (after the check's crash) failed: {failure_summary(record.error)}. That is your "
            "restore code's first run: the state.pt rank 0 saved holds 'model', 'optimizer', 'epoch' and "
            "'history' (torch.load it inside checkpoint.as_directory()); load the weights into the model "
            "inside DDP's wrapper (model.module with 2 workers)."
        ]
    started = _first_epoch(record, 2)
    first = record.reports(0, 1)[0]["metrics"].get("train_loss") if record.reports(0, 1) else None
    resumed = record.reports(0, 2)[0]["metrics"].get("train_loss") if record.reports(0, 2) else None
    trained_weights = None if first is None or resumed is None else resumed < RESUMED_LOSS * first
    if started == 0:
        if trained_weights:
            return [
                f"attempt 2 restored the weights but not the epoch: it trained epoch 0 again instead of "
                f"continuing at epoch {expected}. Start the loop at the checkpoint's epoch + 1."
            ]
        return [
            "attempt 2 started again at epoch 0, with fresh weights: your function ignores "
            "ray.train.get_checkpoint(). Call it first; when it returns a checkpoint, load its state and "
            "continue at its epoch + 1."
        ]
    if started != expected:
        repeated = f" (it trained epoch {saved_epoch} twice)" if started == saved_epoch else ""
        return [
            f"attempt 2 started at epoch {started}{repeated}, but the checkpoint it resumed from holds epoch "
            f"{saved_epoch}, finished: continue at its epoch + 1 ({expected})."
        ]
    problems = []
    if trained_weights is False:
        problems.append(
            f"attempt 2 continued at epoch {expected} but with fresh weights (its loss {resumed:.3f} is no lower "
            f"than the fresh start's {first:.3f}): load the checkpoint's 'model' into the model inside DDP's "
            "wrapper (model.module with 2 workers), and its 'optimizer' into the optimizer."
        )
    history = _final_history(record)
    if history is not None and history != list(range(record.epochs)):
        missing = sorted(set(range(record.epochs)) - set(history))
        twice = sorted({e for e in history if history.count(e) > 1})
        problems.append(
            f"the final checkpoint's history has epochs {history}"
            + (
                f": epoch(s) {missing} are missing; restore the history from the checkpoint too"
                if missing
                else ""
            )
            + (f"; epoch(s) {twice} appear more than once" if twice else "")
            + "."
        )
    return problems


def global_step_problems(record: Any, steps_per_epoch: int) -> list[str]:
    """What is wrong with the ``global_step`` rank 0 reported (empty: right): after epoch ``e`` it
    must be ``steps_per_epoch * (e + 1)``, the optimizer steps of the whole run, so an attempt that
    counts from 0 again (the count not kept in the checkpoint) is named as such."""
    for attempt in (1, 2):
        for report in record.reports(0, attempt):
            metrics = report["metrics"]
            epoch, got = metrics.get("epoch"), metrics.get("global_step")
            if got is None:
                return [
                    f"attempt {attempt}'s report of epoch {epoch} has no 'global_step': add "
                    "metrics['global_step'] = global_step before ray.train.report."
                ]
            expected = steps_per_epoch * (epoch + 1)
            if got == expected:
                continue
            started = _first_epoch(record, attempt) or 0
            if attempt == 2 and got == steps_per_epoch * (epoch + 1 - started):
                return [
                    f"attempt 2 counted global_step from 0 again (epoch {epoch}: {got}, expected "
                    f'{expected}): keep it in the checkpoint ("global_step": global_step in rank 0\'s state) '
                    "and start from state['global_step'] on restore."
                ]
            return [
                f"attempt {attempt}'s epoch {epoch} reported global_step {got}, expected {expected} "
                f"({steps_per_epoch} optimizer steps an epoch on each rank): add len(loader) after each epoch."
            ]
    return []


def check_resumable(train_fn: Any, exercise: str = "04.4") -> None:
    """Run the learner's per-worker function for real (2 workers, 512 digits, 3 epochs), crash rank 1
    once early in epoch 1 (after epoch 0's checkpoint), and say whether attempt 2 resumed: at epoch 1,
    with the trained weights, ending with a history of every epoch once, and reporting a
    ``global_step`` that counts the whole run's optimizer steps across the restart."""

    if not_attempted(exercise, train_fn):
        return None
    if not callable(train_fn):
        raise wrong(exercise, "the answer should be a function my_resumable_loop(config).")
    epochs, train_size, global_batch = 3, 512, 64
    crash_step = train_size // global_batch + 2  # each rank takes 8 steps an epoch: epoch 1's second step
    print(
        f"Exercise {exercise}: training your function on 2 workers for {epochs} short epochs; the check "
        "crashes rank 1 once, early in epoch 1, and Ray Train restarts both...",
        flush=True,
    )
    record = harness.fit_learner_function(
        train_fn,
        f"exercise-{exercise.replace('.', '-')}",
        train_size=train_size,
        epochs=epochs,
        global_batch=global_batch,
        max_failures=1,
        crash_step=crash_step,
    )
    problems = resumable_problems(record, crash_step) or global_step_problems(
        record, train_size // global_batch
    )
    if problems:
        raise ran_but(exercise, problems)
    first, resumed = (record.reports(0, attempt)[0]["metrics"]["train_loss"] for attempt in (1, 2))
    return correct(
        exercise,
        f"attempt 1 checkpointed epoch 0 and crashed in epoch 1; attempt 2 continued at epoch 1 with the "
        f"trained weights (its loss {resumed:.3f}, the fresh start's {first:.3f}), the final history "
        f"has every epoch once, and global_step went on counting across the restart (the check's fit "
        f"took {record.seconds:.0f} s).",
    )
