"""Exercises of lesson 03: a batch transform and a shard reader, both run for real in Ray Data."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from course_utils.core import batch_format
from course_utils.exercises.checks import correct, not_attempted, one_line, ran_but, wrong
from course_utils.lesson03 import raydata

KEEP_DIGITS = (3, 8)  # exercise 03.1: the two-class subset, relabelled 0 (a 3) and 1 (an 8)
EXERCISE_ROWS = 400  # rows of the small dataset the lesson 03 checks run in Ray Data
SHARD_TIMEOUT_S = 120  # how long check_shard_counts waits for the learner's function on both shards
SHARD_ERROR_GRACE_S = 10  # and how long for the other shard once one call raised (it may wait for ever)


def exercise_digits(rows: int = EXERCISE_ROWS, seed: int = 3) -> tuple[Any, Any]:
    """Noise "digits" (uint8 ``[rows, 28, 28]``) and labels whose ten counts all differ, so a count
    that mixes up digits or counts a row twice cannot come out right by chance."""
    rng = np.random.default_rng(seed)
    weights = np.arange(10, 20, dtype=float)[rng.permutation(10)]  # every digit a different share
    counts = np.floor(weights / weights.sum() * rows).astype(int)
    counts[np.argmax(counts)] += rows - counts.sum()
    labels = rng.permutation(np.repeat(np.arange(10), counts)).astype(np.int64)
    images = rng.integers(0, 256, size=(rows, 28, 28), dtype=np.uint8)
    return images, labels


def _pixel_rows(column: Any) -> Any:
    """An ``image`` column as uint8 ``[B, 784]``: raw bytes per row (as Parquet gives) or pixel arrays."""
    column = np.asarray(column)
    if len(column) == 0:
        return np.zeros((0, 28 * 28), dtype=np.uint8)
    if column.dtype == object:
        return np.frombuffer(b"".join(bytes(c) for c in column), dtype=np.uint8).reshape(len(column), -1)
    if column.dtype.kind == "S":  # numpy fixed-size bytes (np.stack of bytes): its buffer holds them all
        return np.frombuffer(column.tobytes(), dtype=np.uint8).reshape(len(column), -1)
    return column.reshape(len(column), -1)


def _transform_batches() -> list[tuple[str, dict[str, Any]]]:
    """Hand-made batches as ``map_batches(batch_format="numpy")`` passes them after ``read_parquet``."""

    rng = np.random.default_rng(7)
    cases = []
    for what, labels in (
        ("a batch of 12 rows", [3, 1, 8, 8, 0, 3, 5, 8, 9, 3, 2, 7]),
        ("a batch with no 3 and no 8", [0, 1, 2, 4, 5]),
    ):
        pixels = rng.integers(0, 256, size=(len(labels), raydata.PIXELS), dtype=np.uint8)
        batch = {
            batch_format.IMAGE: np.array([p.tobytes() for p in pixels], dtype=object),
            batch_format.LABEL: np.array(labels, dtype=np.int64),
        }
        cases.append((what, batch))
    return cases


def transform_problems(transform: Callable[[dict[str, Any]], Any]) -> list[str]:
    """What a learner's "keep the 3s and 8s, relabel them 0 and 1" transform gets wrong, one plain
    line each, from calling it on hand-made numpy batches (no Ray)."""
    columns = {batch_format.IMAGE, batch_format.LABEL}
    for what, batch in _transform_batches():
        keep = np.isin(batch[batch_format.LABEL], KEEP_DIGITS)
        given = {k: v.copy() for k, v in batch.items()}
        try:
            out = transform(given)
        except Exception as error:
            empty = "" if keep.any() else ": a batch may hold no 3 or 8; a mask then gives empty columns"
            return [f"on {what} it raised {one_line(error)}{empty}."]
        if not isinstance(out, dict):
            return [
                f"on {what} it returned a {type(out).__name__}: return the batch's form, a dict of numpy "
                "columns {'image': ..., 'label': ...}."
            ]
        if set(out) != columns:
            return [
                f"it returned the columns {sorted(out)}; return exactly {sorted(columns)} (the next step, "
                "normalise_batch, and the training loop read those two)."
            ]
        lengths = {name: len(np.asarray(out[name])) for name in sorted(columns)}
        if len(set(lengths.values())) > 1:
            return [
                f"on {what} your columns have different lengths {lengths}: cut every column with the "
                "same mask (a label without its image, or the reverse, is no row at all)."
            ]
        labels = np.asarray(out[batch_format.LABEL])
        if not np.issubdtype(labels.dtype, np.integer):
            return [
                f"the labels are {labels.dtype}: make them integers, e.g. .astype(np.int64) "
                "(the loss function wants class numbers)."
            ]
        if len(labels) != keep.sum():
            return [
                f"on {what} it kept {len(labels)} rows, but only {int(keep.sum())} of them are a 3 or an 8: "
                "keep only those rows (a boolean mask, np.isin(batch['label'], (3, 8)), cuts every column alike)."
            ]
        expected = (batch[batch_format.LABEL][keep] == KEEP_DIGITS[1]).astype(np.int64)
        if np.array_equal(labels, batch[batch_format.LABEL][keep]) and len(labels):
            return ["the labels are still 3 and 8: relabel them, 3 -> 0 and 8 -> 1."]
        if np.array_equal(labels, 1 - expected) and len(labels):
            return ["the labels are swapped: a 3 becomes 0 and an 8 becomes 1."]
        if not np.array_equal(labels, expected):
            return [
                f"on {what} the labels are {labels.tolist()}; expected {expected.tolist()} (3 -> 0, 8 -> 1)."
            ]
        try:
            pixels = _pixel_rows(out[batch_format.IMAGE])
        except (TypeError, ValueError):
            pixels = None
        wanted = _pixel_rows(batch[batch_format.IMAGE][keep])
        if pixels is None or pixels.shape != wanted.shape or not np.array_equal(pixels, wanted):
            return [
                "the images are not the kept rows' images, unchanged and in the same order as their labels: "
                "leave the image column as it is and cut it with the same mask as the labels "
                "(normalise_batch runs after your transform)."
            ]
    return []


def check_batch_transform(transform: Any, exercise: str = "03.1") -> None:
    """A ``map_batches`` transform that keeps the 3s and 8s and relabels them 0 and 1: first called on
    hand-made numpy batches, then run for real in Ray Data, batch by batch, with ``normalise_batch``
    after it."""

    if not_attempted(exercise, transform):
        return None
    if isinstance(transform, type) or not callable(transform):
        raise wrong(
            exercise, "the answer should be a function, def my_transform(batch): ... returning a dict."
        )
    problems = transform_problems(transform)
    if problems:
        raise ran_but(exercise, problems)
    images, labels = exercise_digits()
    pipeline = (
        raydata.digits_dataset(images, labels)
        .map_batches(transform, batch_format="numpy", batch_size=32)
        .map_batches(raydata.normalise_batch, batch_format="numpy", batch_size=None)
    )
    try:
        got = [b[batch_format.LABEL] for b in pipeline.iter_batches(batch_size=None, batch_format="numpy")]
    except Exception as error:  # the learner's function failed inside a Ray Data task: say how, in one line
        raise wrong(exercise, f"your function raised inside Ray Data: {one_line(error)}") from None
    counts = np.bincount(np.concatenate(got) if got else np.zeros(0, np.int64), minlength=2)
    expected = np.array([(labels == d).sum() for d in KEEP_DIGITS])
    if counts.shape != (2,) or not np.array_equal(counts, expected):
        raise ran_but(
            exercise,
            [
                f"in Ray Data it gave label counts {counts.tolist()}; the {len(labels)} rows hold {expected[0]} "
                f"3s and {expected[1]} 8s."
            ],
        )
    return correct(
        exercise,
        f"in Ray Data, {len(labels)} rows in batches of 32 became {int(expected.sum())}: {expected[0]} 3s "
        f"(label 0) and {expected[1]} 8s (label 1), and normalise_batch ran after your transform.",
    )


class _WatchedShard:
    """A worker's shard as ``check_shard_counts`` hands it to the learner's function: the real
    ``DataIterator``, which notes which of its methods the function asked for."""

    def __init__(self, shard: Any):
        self._shard, self.called = shard, []

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        value = getattr(self._shard, name)  # an unknown name raises the real iterator's AttributeError
        self.called.append(name)
        return value

    def __repr__(self) -> str:
        return repr(self._shard)


def _ten_counts(result: Any) -> Any:
    """A learner's result as 10 integer counts (tensor, array, list or {digit: count}), else None."""
    if isinstance(result, dict):
        counts = np.zeros(10, dtype=np.int64)
        try:
            for digit, n in result.items():
                counts[int(digit)] += int(n)
        except (TypeError, ValueError, IndexError):
            return None
        return counts
    if hasattr(result, "detach"):  # a torch tensor, maybe on a GPU
        result = result.detach().cpu().numpy()
    try:
        counts = np.asarray(result)
    except (TypeError, ValueError):
        return None
    if counts.shape != (10,) or not np.issubdtype(counts.dtype, np.number):
        return None
    if not np.array_equal(counts, np.round(counts)):
        return None
    return counts.astype(np.int64)


def shard_problems(runs: list[dict[str, Any]], shard_rows: int, truth: Any) -> list[str]:
    """What a learner's ``count_digits(shard)`` got wrong, one plain line, from its runs on the two
    shards of a ``streaming_split``: each run ``{"finished", "error", "result", "called"}`` (the
    shard methods it asked for); ``truth`` is the whole dataset's ten label counts."""
    for run in runs:
        error = run["error"]
        if error is None:
            continue
        text = one_line(error)
        if isinstance(error, TypeError) and "not iterable" in str(error):
            return [
                "it looped over the shard itself (for batch in shard): a shard is a DataIterator, not a "
                "list; ask it for batches, shard.iter_torch_batches(batch_size=...)."
            ]
        if isinstance(error, AttributeError) and "DataIterator" in str(error):
            return [
                f"it raised {text}: a worker's shard is a DataIterator, not a Dataset; it streams batches "
                "(iter_torch_batches) and has no count(), take() or map_batches(); count while you iterate."
            ]
        return [f"it raised {text}."]
    if not all(run["finished"] for run in runs):
        return [
            f"it did not return within {SHARD_TIMEOUT_S} s on both shards. A split starts an epoch only when "
            "every shard asks for it, so a reader that stops early or never starts leaves the other "
            "waiting (Going further at the end of the lesson shows that hang)."
        ]
    called = {name for run in runs for name in run["called"]}
    if not called & {"iter_torch_batches", "iter_batches", "iter_rows"}:
        return [
            "it never read the shard it was given. Counting a dataset from the notebook instead makes every "
            "worker count every row, once per worker; iterate the shard argument."
        ]
    if "iter_rows" in called:
        return [
            "it read the shard row by row (iter_rows): one Python dict per digit; a training worker asks for "
            "whole batches as tensors, shard.iter_torch_batches(batch_size=...)."
        ]
    if "iter_torch_batches" not in called:
        return [
            "it read numpy batches (iter_batches); a training worker asks for tensors, ready for the model: "
            "shard.iter_torch_batches(batch_size=...)."
        ]
    counts = [_ten_counts(run["result"]) for run in runs]
    if any(c is None for c in counts):
        shown = repr(next(run["result"] for run, c in zip(runs, counts, strict=True) if c is None))[:120]
        return [
            f"it returned {shown}; return 10 counts, counts[d] = rows of this shard whose label is d "
            "(a tensor, an array or a list)."
        ]
    totals = [int(c.sum()) for c in counts]
    if any(t < shard_rows for t in totals):
        return [
            f"it counted {totals} rows on the two shards, but each holds {shard_rows}: read every batch to the "
            "end (no break after the first, no drop_last=True: the last batch may be smaller)."
        ]
    if any(t > shard_rows for t in totals):
        return [
            f"it counted {totals} rows on the two shards, but each holds {shard_rows}: count each row once, "
            "in one pass over the shard."
        ]
    together = counts[0] + counts[1]
    if not np.array_equal(together, np.asarray(truth)):
        return [
            f"the two shards' counts add up to {together.tolist()}, but the data holds "
            f"{np.asarray(truth).tolist()} per digit: count the values of batch['label'] "
            "(torch.bincount(labels, minlength=10))."
        ]
    return []


def check_shard_counts(count_digits: Any, exercise: str = "03.2") -> None:
    """Runs the learner's ``count_digits(shard)`` for real on both shards of a 2-way
    ``streaming_split(equal=True)`` (what ``datasets=`` gives 2 workers), at the same time in two
    threads, and compares the counts with the labels counted without Ray."""
    import threading
    import time

    if not_attempted(exercise, count_digits):
        return None
    if isinstance(count_digits, type) or not callable(count_digits):
        raise wrong(
            exercise, "the answer should be a function, def count_digits(shard): ... returning 10 counts."
        )
    images, labels = exercise_digits()
    truth = np.bincount(labels, minlength=10)
    pipeline = raydata.digits_dataset(images, labels).map_batches(
        raydata.normalise_batch, batch_format="numpy", batch_size=None
    )
    shards = [_WatchedShard(s) for s in pipeline.streaming_split(2, equal=True)]
    runs = [{"finished": False, "error": None, "result": None, "called": s.called} for s in shards]

    def read(i: int) -> None:  # one training worker: its shard, its own thread
        try:
            runs[i]["result"] = count_digits(shards[i])
        except Exception as error:
            runs[i]["error"] = error
        runs[i]["finished"] = True

    # Both at once: a streaming split starts an epoch only when every shard asks for it.
    threads = [threading.Thread(target=read, args=(i,), daemon=True) for i in range(2)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + SHARD_TIMEOUT_S
    while not all(run["finished"] for run in runs) and time.monotonic() < deadline:
        if any(run["error"] is not None for run in runs):  # the other reader may now wait for ever
            deadline = min(deadline, time.monotonic() + SHARD_ERROR_GRACE_S)
        time.sleep(0.1)
    problems = shard_problems(runs, len(labels) // 2, truth)
    if problems:
        raise ran_but(exercise, problems)
    first, second = (_ten_counts(run["result"]) for run in runs)
    return correct(
        exercise,
        f"each of the 2 shards held {len(labels) // 2} of the {len(labels)} rows (shard 0: "
        f"{first.tolist()}, shard 1: {second.tolist()}); together every digit counted once.",
    )
