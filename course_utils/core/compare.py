"""How a lesson's run compares with an earlier lesson's on the same machine, said in sentences.

Lessons 02 and 03 print their throughput beside lesson 01's (its ``metrics.csv``), the ratio and
the mechanism behind it; lesson 03 also sets its Ray Data-fed fit beside lesson 02's
``DataLoader``-fed one (its run in the learner's storage).
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Sequence

import pandas as pd

from course_utils.core.history import read_reports, run_folder
from course_utils.core.storage import LESSON02_RUN, Storage

LESSON01_OUTPUT = "lesson01-baseline"  # Storage.local_output_path(...) of lesson 01's baseline


def steady(rates: Sequence[float]) -> float:
    """A throughput over epochs: the median of the epochs after the first (the first pays for warm-up)."""
    rates = list(rates)
    return statistics.median(rates[1:] if len(rates) > 1 else rates)


def lesson01_history(store: Storage) -> pd.DataFrame | None:
    """Lesson 01's per-epoch metrics from its output folder in ``store``, or None when lesson 01 has
    not run there."""
    # only reads: a lesson run before lesson 01 creates no folder here
    path = store.local_output_path(LESSON01_OUTPUT) / "metrics.csv"
    return pd.read_csv(path) if path.exists() else None


# A ratio to lesson 01 under this is "not faster": images/s varies about 5% between runs here.
NO_GAIN = 1.05


def against_lesson01(
    history: pd.DataFrame,
    store: Storage | None,
    *,
    workers: int,
    use_gpu: bool,
    what: str = "this run",
    baseline: pd.DataFrame | None = None,
    cores: int | None = None,
) -> list[str]:
    """Sentences: lesson 01's images/s and ``history``'s (all workers together), their ratio, and why;
    ``baseline`` defaults to lesson 01's metrics saved in ``store`` (without them: run lesson 01); a
    given ``baseline`` needs no ``store``."""
    baseline = lesson01_history(store) if baseline is None else baseline
    rate = steady(history["images_per_s"])
    if baseline is None or baseline.empty:
        return [
            f"{what[:1].upper() + what[1:]} trained {rate:,.0f} images/s (all workers together). Run lesson 01 on this "
            "machine to see it beside plain PyTorch."
        ]
    plain = steady(baseline["images_per_s"])
    ratio = rate / plain
    lines = [
        f"Lesson 01's plain PyTorch trained {plain:,.0f} images/s in one process; {what} trained {rate:,.0f} "
        f"images/s with {workers} worker(s) together: {ratio:.2f}x lesson 01's."
    ]
    if use_gpu:
        lines.append(
            f"Each of the {workers} worker(s) has a GPU of its own: more workers bring more GPUs, and the "
            "all-reduce of the gradients every step is the price."
        )
        return lines
    cores = cores or os.cpu_count() or 1
    if workers > 1 and ratio < NO_GAIN:
        lines.append(
            f"Why it is not faster here: the {workers} workers share the {cores} CPU core(s) lesson 01's one "
            f"process had to itself, so together they have no more compute, and DDP adds an all-reduce of "
            "the gradients every step. Distributing pays when each worker brings hardware of its own: a "
            "GPU, or a machine."
        )
    return lines


def lesson02_history(store: Storage) -> pd.DataFrame | None:
    """Lesson 02's run as its ``ReportLog`` kept it in this learner's storage, or None when it has not run there."""
    fs, folder = run_folder(*store.for_ray(), LESSON02_RUN)
    rows = read_reports(fs, folder)
    return pd.DataFrame(rows) if rows else None


# Two throughputs within this share of each other are "the same" here: epochs vary more than that.
SAME_WITHIN = 0.10


# Where Ray Data's gain shows, said after either reading of lesson 03 against lesson 02.
RAY_DATA_GAIN = (
    "Ray Data's gain shows where preparing the batches is the slow part: the per-row pipeline against "
    "the vectorised one (section 12), or CPU-heavy preprocessing in front of GPUs."
)


def against_lesson02(
    history: pd.DataFrame, baseline: pd.DataFrame | None, what: str = "this run"
) -> list[str]:
    """Sentences: lesson 02's fit (fed by a PyTorch ``DataLoader``) beside ``history``'s, in images/s, and
    what their ratio says; without lesson 02's run, how to get it."""
    rate = steady(history["images_per_s"])
    if baseline is None or baseline.empty:
        return [f"Run lesson 02 with this storage to see {what} beside its DataLoader-fed fit."]
    theirs = steady(baseline["images_per_s"])
    ratio = rate / theirs
    workers = int(baseline["world_size"].iloc[-1]) if "world_size" in baseline else None
    lines = [
        f"Lesson 02's fit, fed by a PyTorch DataLoader ({workers or '?'} worker(s)), trained {theirs:,.0f} "
        f"images/s; {what} trained {rate:,.0f} images/s: {ratio:.2f}x (each the median of the epochs after "
        "the first)."
    ]
    if abs(ratio - 1) <= SAME_WITHIN:
        lines.append(
            f"Within {SAME_WITHIN:.0%} of each other: the training step, not the data, sets the pace of these "
            "workers. " + RAY_DATA_GAIN
        )
    elif ratio < 1:
        lines.append(
            "Slower here: on one machine Ray Data's read tasks run on the same cores as the training "
            "workers (section 14 splits them), while lesson 02's DataLoader reads inside each worker's "
            "own process. " + RAY_DATA_GAIN
        )
    return lines
