"""Self-checks for the exercises at the end of each lesson.

Each exercise cell starts with a placeholder (``...``) where the learner's answer goes. A check
called on the placeholder prints "not attempted yet" and where the solution is, without failing
(so the course runs headless and in CI as shipped); on a wrong answer it raises
``ExerciseError`` saying in plain words what is wrong; on a right one it prints why it is right
("Exercise NN.k: correct. ..."). Checks return None, so a notebook cell shows their words and no
stray ``True``/``False``. Hints and solutions: ``hint("NN.k")``, ``solution("NN.k")``, read from
``notebooks/solutions/NN_*.md``.
"""

from __future__ import annotations

import math
import pickle
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from course_utils.config import temporary_env
from course_utils.solutions import solutions_dir


class ExerciseError(AssertionError):
    """A learner's answer is wrong; the message says what is wrong and how to get it right."""


def _solution(exercise: str) -> str:
    lesson = exercise.split(".")[0]
    found = sorted(solutions_dir().glob(f"{lesson}_*.md"))
    return f"notebooks/solutions/{found[0].name}" if found else f"notebooks/solutions/{lesson}_*.md"


def _pending(exercise: str, answer: Any) -> bool:
    """True (after saying so) when the learner has not replaced the placeholder yet."""
    if answer is not ...:
        return False
    print(
        f"Exercise {exercise}: not attempted yet. Replace the `...` in this cell with your answer "
        f'and run it again. Stuck? checks.hint("{exercise}") gives a hint, '
        f'checks.solution("{exercise}") the answer (also in {_solution(exercise)}).'
    )
    return True


def hint(exercise: str) -> None:
    """Print a hint for exercise ``"NN.k"``: a nudge toward the answer, not the answer."""
    from course_utils import solutions

    print(f"Hint for exercise {exercise}: {solutions.hint(exercise)}")


def solution(exercise: str) -> None:
    """Show the published solution of exercise ``"NN.k"`` (try the hint first)."""
    from course_utils import solutions

    text = f"**Solution to exercise {exercise}**\n\n{solutions.solution(exercise)}"
    try:
        from IPython.display import Markdown, display

        display(Markdown(text))
    except ImportError:
        print(text)


def _wrong(exercise: str, message: str) -> ExerciseError:
    return ExerciseError(f"Exercise {exercise}: {message}")


def _ran_but(exercise: str, problems: list[str]) -> ExerciseError:
    """The error for a learner's function that ran for real but did something wrong: one line each."""
    return _wrong(exercise, "your function ran, but\n" + "\n".join(f"- {p}" for p in problems))


def _right(exercise: str, message: str) -> None:
    print(f"Exercise {exercise}: correct. {message}")


# --------------------------------------------------------------------------- lesson 01


def check_steps_per_epoch(answer: Any, dataset_size: int, batch_size: int, exercise: str = "01.1") -> None:
    """How many optimizer steps one epoch takes: a DataLoader keeps the last, smaller batch."""
    if _pending(exercise, answer):
        return None
    expected = math.ceil(dataset_size / batch_size)
    if not isinstance(answer, int | float) or isinstance(answer, bool):
        raise _wrong(
            exercise, f"the answer should be a number of steps, got {type(answer).__name__} {answer!r}."
        )
    if answer == dataset_size // batch_size and answer != expected:
        raise _wrong(
            exercise,
            f"{answer} leaves out the last, smaller batch: a DataLoader keeps it unless drop_last=True, so "
            f"{dataset_size:,} / {batch_size} = {dataset_size / batch_size:.2f} rounds up.",
        )
    if answer != expected:
        raise _wrong(
            exercise,
            f"{answer} is not it. One step trains on one batch; count how many batches of {batch_size} "
            f"it takes to cover {dataset_size:,} images.",
        )
    return _right(
        exercise, f"{dataset_size:,} images in batches of {batch_size} = {expected} steps per epoch."
    )


class _Payload:
    """Pickled into a file, it would run code on load: what ``weights_only=True`` refuses."""

    def __reduce__(self):
        return (open, (str(Path(tempfile.gettempdir()) / "course-unsafe-load-ran"), "w"))


def check_safe_loader(load: Any, exercise: str = "01.2") -> None:
    """``load(path)`` must return saved weights and refuse a file that would run code, on any
    PyTorch: the crafted file is also loaded the way PyTorch < 2.6 does by default."""
    import torch

    from course_utils.model import build_resnet18

    if _pending(exercise, load):
        return None
    if not callable(load):
        raise _wrong(exercise, f"the answer should be a function taking a path, got {type(load).__name__}.")
    with tempfile.TemporaryDirectory() as tmp:
        good, evil = Path(tmp) / "model.pt", Path(tmp) / "evil.pt"
        weights = build_resnet18().state_dict()
        torch.save(weights, good)
        with open(evil, "wb") as f:
            pickle.dump({"conv1.weight": _Payload()}, f, protocol=2)  # torch.load's own protocol
        loaded = load(good)
        if not isinstance(loaded, dict) or set(loaded) != set(weights):
            raise _wrong(exercise, "load(path) should return the saved state_dict (a dict of tensors).")
        if not torch.equal(loaded["conv1.weight"], weights["conv1.weight"]):
            raise _wrong(exercise, "the tensors you return are not the saved ones.")
        # PyTorch >= 2.6 refuses the crafted file by default; before 2.6 (and wherever this
        # switch of torch's is set) the default is a full unpickle. A loader that relies on the
        # default is safe only by luck, so it is tried both ways.
        for label, env in (("this PyTorch's default", {}), (_OLD_DEFAULT, {_FORCE_UNSAFE_DEFAULT: "1"})):
            marker = Path(tempfile.gettempdir()) / "course-unsafe-load-ran"
            marker.unlink(missing_ok=True)
            with temporary_env(env):
                try:
                    load(evil)
                except Exception:  # refused, as it should be
                    pass
            ran = marker.exists()
            marker.unlink(missing_ok=True)
            if ran:
                raise _wrong(
                    exercise,
                    f"your loader ran code hidden inside the file (with {label}). Pass weights_only=True to "
                    "torch.load yourself, so it only unpickles tensors and plain containers on every PyTorch "
                    "version, not just where the default happens to be safe.",
                )
    return _right(
        exercise, "it loads weights and refuses a file that would run code, whatever torch.load's default is."
    )


_FORCE_UNSAFE_DEFAULT = "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"  # torch's switch: default weights_only=False
_OLD_DEFAULT = "PyTorch < 2.6's default, weights_only=False"


# --------------------------------------------------------------------------- lesson 02


def check_per_worker_batch(split: Any, exercise: str = "02.1") -> None:
    """``split(global_batch, workers)`` divides evenly or raises ``ValueError``."""
    if _pending(exercise, split):
        return None
    if not callable(split):
        raise _wrong(exercise, "the answer should be a function split(global_batch, workers).")
    for global_batch, workers, expected in ((128, 2, 64), (128, 4, 32), (256, 1, 256), (96, 3, 32)):
        got = split(global_batch, workers)
        if got != expected:
            raise _wrong(
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
            raise _wrong(
                exercise,
                f"split({global_batch}, {workers}) raised {type(exc).__name__}; raise a ValueError that says "
                "why instead.",
            ) from exc
        raise _wrong(
            exercise,
            f"split({global_batch}, {workers}) returned {got!r}; it cannot split evenly, so it should raise "
            "ValueError (otherwise workers train on different batch sizes).",
        )
    return _right(exercise, "even splits come out right and impossible ones raise ValueError.")


def check_scaling_config(
    config: Any, num_workers: int, cpus_per_worker: float, use_gpu: bool = False, exercise: str = "02.2"
) -> None:
    """A ``ScalingConfig`` asking for ``num_workers`` workers with ``cpus_per_worker`` CPUs each."""
    from ray.train import ScalingConfig

    if _pending(exercise, config):
        return None
    if not isinstance(config, ScalingConfig):
        raise _wrong(
            exercise, f"the answer should be a ray.train.ScalingConfig, got {type(config).__name__}."
        )
    if config.num_workers != num_workers:
        raise _wrong(exercise, f"num_workers is {config.num_workers}; the task asks for {num_workers}.")
    if bool(config.use_gpu) != use_gpu:
        raise _wrong(exercise, f"use_gpu is {config.use_gpu}; the task asks for {use_gpu}.")
    cpus = (config.resources_per_worker or {}).get("CPU", 1)
    if cpus != cpus_per_worker:
        raise _wrong(
            exercise,
            f"each worker gets {cpus:g} CPU; ask for {cpus_per_worker:g} with "
            f'resources_per_worker={{"CPU": {cpus_per_worker:g}}}.',
        )
    return _right(
        exercise,
        f"{num_workers} workers x {cpus_per_worker:g} CPU = {num_workers * cpus_per_worker:g} CPU slots.",
    )


# A working loop's last-epoch loss is well under this share of its first epoch's (3 epochs, 512
# digits); a loop that does not learn stays near 1.0, give or take the shuffle.
LOSS_DROP = 0.8


def migration_problems(record: Any) -> list[str]:
    """What a checked fit of a lesson 02 per-worker function did wrong, in plain words (empty: right)."""
    from course_utils.fitcheck import failure_summary

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
            "(or use checkpoints.rank0_checkpoint), or the run cannot resume and has no model to load."
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
    from course_utils import fitcheck

    if _pending(exercise, train_fn):
        return None
    if not callable(train_fn):
        raise _wrong(exercise, "the answer should be a function my_train_loop(config).")
    print(f"Exercise {exercise}: training your function on 2 workers for 3 short epochs (about a minute)...")
    record = fitcheck.run(train_fn, f"exercise-{exercise.replace('.', '-')}")
    problems = migration_problems(record)
    if problems:
        raise _ran_but(exercise, problems)
    losses = record.losses(0)
    return _right(
        exercise,
        f"both ranks reported every epoch, rank 0 alone checkpointed, set_epoch ran each epoch, each "
        f"worker trained on batches of {record.global_batch // record.num_workers}, and the loss fell "
        f"from {losses[0]:.3f} to {losses[-1]:.3f}.",
    )


# --------------------------------------------------------------------------- lesson 03

KEEP_DIGITS = (3, 8)  # exercise 03.1: the two-class subset, relabelled 0 (a 3) and 1 (an 8)
EXERCISE_ROWS = 400  # rows of the small dataset the lesson 03 checks run in Ray Data
SHARD_TIMEOUT_S = 120  # how long check_shard_counts waits for the learner's function on both shards
SHARD_ERROR_GRACE_S = 10  # and how long for the other shard once one call raised (it may wait for ever)


def exercise_digits(rows: int = EXERCISE_ROWS, seed: int = 3) -> tuple[Any, Any]:
    """Noise "digits" (uint8 ``[rows, 28, 28]``) and labels whose ten counts all differ, so a count
    that mixes up digits or counts a row twice cannot come out right by chance."""
    import numpy as np

    rng = np.random.default_rng(seed)
    weights = np.arange(10, 20, dtype=float)[rng.permutation(10)]  # every digit a different share
    counts = np.floor(weights / weights.sum() * rows).astype(int)
    counts[np.argmax(counts)] += rows - counts.sum()
    labels = rng.permutation(np.repeat(np.arange(10), counts)).astype(np.int64)
    images = rng.integers(0, 256, size=(rows, 28, 28), dtype=np.uint8)
    return images, labels


def _one_line(error: BaseException) -> str:
    """``Type: message`` of the error a learner's code raised, unwrapped from Ray's task errors."""
    seen = set()
    while id(error) not in seen:
        seen.add(id(error))
        inner = getattr(error, "cause", None) or error.__cause__
        if not isinstance(inner, BaseException):
            break
        error = inner
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[-1][:300] if text else ''}".rstrip(": ")


def _pixel_rows(column: Any) -> Any:
    """An ``image`` column as uint8 ``[B, 784]``: raw bytes per row (as Parquet gives) or pixel arrays."""
    import numpy as np

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
    import numpy as np

    from course_utils import raydata

    rng = np.random.default_rng(7)
    cases = []
    for what, labels in (
        ("a batch of 12 rows", [3, 1, 8, 8, 0, 3, 5, 8, 9, 3, 2, 7]),
        ("a batch with no 3 and no 8", [0, 1, 2, 4, 5]),
    ):
        pixels = rng.integers(0, 256, size=(len(labels), raydata.PIXELS), dtype=np.uint8)
        batch = {
            raydata.IMAGE: np.array([p.tobytes() for p in pixels], dtype=object),
            raydata.LABEL: np.array(labels, dtype=np.int64),
        }
        cases.append((what, batch))
    return cases


def transform_problems(transform: Callable[[dict[str, Any]], Any]) -> list[str]:
    """What a learner's "keep the 3s and 8s, relabel them 0 and 1" transform gets wrong, one plain
    line each, from calling it on hand-made numpy batches (no Ray)."""
    import numpy as np

    from course_utils import raydata

    columns = {raydata.IMAGE, raydata.LABEL}
    for what, batch in _transform_batches():
        keep = np.isin(batch[raydata.LABEL], KEEP_DIGITS)
        given = {k: v.copy() for k, v in batch.items()}
        try:
            out = transform(given)
        except Exception as error:
            empty = "" if keep.any() else ": a batch may hold no 3 or 8; a mask then gives empty columns"
            return [f"on {what} it raised {_one_line(error)}{empty}."]
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
        labels = np.asarray(out[raydata.LABEL])
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
        expected = (batch[raydata.LABEL][keep] == KEEP_DIGITS[1]).astype(np.int64)
        if np.array_equal(labels, batch[raydata.LABEL][keep]) and len(labels):
            return ["the labels are still 3 and 8: relabel them, 3 -> 0 and 8 -> 1."]
        if np.array_equal(labels, 1 - expected) and len(labels):
            return ["the labels are swapped: a 3 becomes 0 and an 8 becomes 1."]
        if not np.array_equal(labels, expected):
            return [
                f"on {what} the labels are {labels.tolist()}; expected {expected.tolist()} (3 -> 0, 8 -> 1)."
            ]
        try:
            pixels = _pixel_rows(out[raydata.IMAGE])
        except (TypeError, ValueError):
            pixels = None
        wanted = _pixel_rows(batch[raydata.IMAGE][keep])
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
    import numpy as np

    from course_utils import raydata

    if _pending(exercise, transform):
        return None
    if isinstance(transform, type) or not callable(transform):
        raise _wrong(
            exercise, "the answer should be a function, def my_transform(batch): ... returning a dict."
        )
    problems = transform_problems(transform)
    if problems:
        raise _ran_but(exercise, problems)
    images, labels = exercise_digits()
    pipeline = (
        raydata.digits_dataset(images, labels)
        .map_batches(transform, batch_format="numpy", batch_size=32)
        .map_batches(raydata.normalise_batch, batch_format="numpy", batch_size=None)
    )
    try:
        got = [b[raydata.LABEL] for b in pipeline.iter_batches(batch_size=None, batch_format="numpy")]
    except Exception as error:  # the learner's function failed inside a Ray Data task: say how, in one line
        raise _wrong(exercise, f"your function raised inside Ray Data: {_one_line(error)}") from None
    counts = np.bincount(np.concatenate(got) if got else np.zeros(0, np.int64), minlength=2)
    expected = np.array([(labels == d).sum() for d in KEEP_DIGITS])
    if counts.shape != (2,) or not np.array_equal(counts, expected):
        raise _ran_but(
            exercise,
            [
                f"in Ray Data it gave label counts {counts.tolist()}; the {len(labels)} rows hold {expected[0]} "
                f"3s and {expected[1]} 8s."
            ],
        )
    return _right(
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
    import numpy as np

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
    import numpy as np

    for run in runs:
        error = run["error"]
        if error is None:
            continue
        text = _one_line(error)
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

    import numpy as np

    from course_utils import raydata

    if _pending(exercise, count_digits):
        return None
    if isinstance(count_digits, type) or not callable(count_digits):
        raise _wrong(
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
        raise _ran_but(exercise, problems)
    first, second = (_ten_counts(run["result"]) for run in runs)
    return _right(
        exercise,
        f"each of the 2 shards held {len(labels) // 2} of the {len(labels)} rows (shard 0: "
        f"{first.tolist()}, shard 1: {second.tolist()}); together every digit counted once.",
    )


# --------------------------------------------------------------------------- lesson 04


def check_failure_config(config: Any, max_failures: int, exercise: str = "04.1") -> None:
    """A ``FailureConfig`` that retries ``max_failures`` times."""
    from ray.train import FailureConfig

    if _pending(exercise, config):
        return None
    if not isinstance(config, FailureConfig):
        raise _wrong(
            exercise, f"the answer should be a ray.train.FailureConfig, got {type(config).__name__}."
        )
    if config.max_failures != max_failures:
        raise _wrong(
            exercise,
            f"max_failures is {config.max_failures}; the task allows {max_failures} retries "
            "(-1 would retry for ever, 0 never).",
        )
    return _right(
        exercise, f"the run survives {max_failures} failures, restarting from the latest checkpoint."
    )


def check_checkpoint_config(
    config: Any, num_to_keep: int, attribute: str, order: str, exercise: str = "04.2"
) -> None:
    """A ``CheckpointConfig`` keeping the ``num_to_keep`` best checkpoints by ``attribute``."""
    from ray.train import CheckpointConfig

    if _pending(exercise, config):
        return None
    if not isinstance(config, CheckpointConfig):
        raise _wrong(
            exercise, f"the answer should be a ray.train.CheckpointConfig, got {type(config).__name__}."
        )
    if config.num_to_keep != num_to_keep:
        raise _wrong(exercise, f"num_to_keep is {config.num_to_keep}; keep {num_to_keep}.")
    if config.checkpoint_score_attribute != attribute:
        raise _wrong(
            exercise,
            f"checkpoints are ranked by {config.checkpoint_score_attribute!r}; rank them by {attribute!r}.",
        )
    if config.checkpoint_score_order != order:
        raise _wrong(
            exercise,
            f"checkpoint_score_order is {config.checkpoint_score_order!r}: for {attribute!r} the best is the "
            f"{'lowest' if order == 'min' else 'highest'}, so use {order!r}.",
        )
    return _right(exercise, f"Ray keeps the {num_to_keep} checkpoints with the {order} {attribute}.")


def check_resume_epoch(answer: Any, history: Any, exercise: str = "04.3") -> None:
    """The epoch a resumed attempt started at, read from a run's metric history (``start_epoch``)."""
    if _pending(exercise, answer):
        return None
    starts = sorted({int(s) for s in history["start_epoch"]})
    resumed = [s for s in starts if s > 0]
    if not resumed:
        raise _wrong(
            exercise, "this run never resumed (every epoch has start_epoch 0): pick a run that failed."
        )
    expected = resumed[-1]
    if answer != expected:
        hint = (
            " (that is the epoch that was saved; training continues at the next one)"
            if answer == expected - 1
            else ""
        )
        raise _wrong(
            exercise, f"{answer!r} is not where the last attempt started{hint}; look at 'start_epoch'."
        )
    return _right(
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
    from course_utils import checkpoints

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
    from course_utils.fitcheck import failure_summary

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
            "at the end of every epoch (with checkpoints.rank0_checkpoint(...) as checkpoint: "
            "ray.train.report(metrics, checkpoint=checkpoint))."
        ]
    saved_epoch = int(saved[-1]["metrics"].get("epoch", len(record.reports(0, 1)) - 1))
    expected = saved_epoch + 1
    if record.error is not None:
        return [
            f"attempt 2 (after the check's crash) failed: {failure_summary(record.error)}. That is your "
            "restore code's first run: the state holds 'model', 'optimizer', 'epoch' and 'history' "
            "(checkpoints.load_state(checkpoint)); load the weights into unwrap(worker.model)."
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
            f"than the fresh start's {first:.3f}): load the checkpoint's 'model' into unwrap(worker.model), "
            "and its 'optimizer' into worker.optimizer."
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
                    f"{expected}): keep it in the checkpoint (training_state(..., global_step=global_step)) "
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
    from course_utils import fitcheck

    if _pending(exercise, train_fn):
        return None
    if not callable(train_fn):
        raise _wrong(exercise, "the answer should be a function my_resumable_loop(config).")
    epochs, train_size, global_batch = 3, 512, 64
    crash_step = train_size // global_batch + 2  # each rank takes 8 steps an epoch: epoch 1's second step
    print(
        f"Exercise {exercise}: training your function on 2 workers for {epochs} short epochs; the check "
        "crashes rank 1 once, early in epoch 1, and Ray Train restarts both (about a minute)...",
        flush=True,
    )
    record = fitcheck.run(
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
        raise _ran_but(exercise, problems)
    first, resumed = (record.reports(0, attempt)[0]["metrics"]["train_loss"] for attempt in (1, 2))
    return _right(
        exercise,
        f"attempt 1 checkpointed epoch 0 and crashed in epoch 1; attempt 2 continued at epoch 1 with the "
        f"trained weights (its loss {resumed:.3f}, the fresh start's {first:.3f}), the final history "
        f"has every epoch once, and global_step went on counting across the restart.",
    )


# --------------------------------------------------------------------------- lesson 05


def check_accuracy_fn(accuracy: Any, exercise: str = "05.1") -> None:
    """``accuracy(labels, predictions)`` is the share of equal entries; mismatched inputs raise."""
    import numpy as np

    if _pending(exercise, accuracy):
        return None
    if not callable(accuracy):
        raise _wrong(exercise, "the answer should be a function accuracy(labels, predictions).")
    labels = np.array([0, 1, 2, 3, 4, 5, 6, 7])
    cases = [(labels, 1.0), (np.array([0, 1, 2, 3, 0, 0, 0, 0]), 0.5), ((labels + 1) % 8, 0.0)]
    for predictions, expected in cases:
        got = accuracy(labels, predictions)
        if not isinstance(got, int | float | np.floating) or not math.isclose(float(got), expected):
            raise _wrong(
                exercise,
                f"accuracy({labels.tolist()}, {predictions.tolist()}) returned {got!r}, expected {expected} "
                "(the share of predictions equal to the label, from 0 to 1).",
            )
    try:
        got = accuracy(labels, labels[:4])
    except (ValueError, IndexError):
        return _right(exercise, "a share between 0 and 1, and mismatched inputs are refused.")
    raise _wrong(
        exercise,
        f"8 labels but 4 predictions returned {got!r}; raise ValueError instead (numpy broadcasting or "
        "zip would silently score the wrong pairs).",
    )


def predictor_problems(
    out: dict[str, Any] | None, labels: Any, expected_predictions: Any, expected_confidence: Any
) -> list[str]:
    """What a learner's batch predictor got wrong, one plain line each, from what the pipeline
    returned (``{"label", "prediction", "confidence"}`` columns, concatenated) and the reference."""
    import numpy as np

    if out is None:
        return ["the pipeline returned no rows: __call__ must return a dict of columns for every batch."]
    missing = [c for c in ("label", "prediction", "confidence") if c not in out]
    if missing:
        hints = {
            "label": "pass the batch's labels through (out['label'] = batch['label']) so predictions stay paired",
            "prediction": "return the predicted digit in a 'prediction' column",
            "confidence": "return the softmax probability of the predicted digit in a 'confidence' column",
        }
        return [f"no {c!r} column: {hints[c]}." for c in missing]
    problems = []
    prediction, confidence = np.asarray(out["prediction"]), np.asarray(out["confidence"], dtype=float)
    if prediction.ndim != 1 or len(prediction) != len(labels):
        return [f"'prediction' has shape {prediction.shape}, one digit per image expected ({len(labels)},)."]
    if not np.array_equal(np.sort(np.asarray(out["label"])), np.sort(np.asarray(labels))):
        problems.append("the 'label' column does not hold the batch's labels.")
    if confidence.shape != prediction.shape:
        problems.append(
            f"'confidence' has shape {confidence.shape}: one number per image, the top probability."
        )
    elif confidence.min() < 0 or confidence.max() > 1:
        problems.append(
            "'confidence' has values outside 0..1: those are logits; apply torch.softmax(logits, dim=1) "
            "and take the largest probability."
        )
    order = np.argsort(np.asarray(out["label"]), kind="stable")
    ref_order = np.argsort(np.asarray(labels), kind="stable")
    if not problems and not np.array_equal(prediction[order], np.asarray(expected_predictions)[ref_order]):
        problems.append(
            "the predictions differ from the model's: feed it inference.to_model_input(batch['image']) and "
            "take logits.argmax(dim=1)."
        )
    if not problems and not np.allclose(
        confidence[order], np.asarray(expected_confidence)[ref_order], atol=1e-4
    ):
        problems.append("'confidence' is not the softmax probability of the predicted digit.")
    return problems


def check_batch_predictor(
    predictor: Any, checkpoint: Any, images: Any, labels: Any, exercise: str = "05.2"
) -> None:
    """Runs the learner's class for real: Ray Data ``map_batches`` on a pool of one actor over
    ``images``, then compares each prediction and confidence with the course model's own."""
    import numpy as np
    import ray.data
    import torch

    from course_utils import inference

    if _pending(exercise, predictor):
        return None
    if not isinstance(predictor, type) or not any("__call__" in vars(k) for k in predictor.__mro__[:-1]):
        raise _wrong(
            exercise,
            "map_batches with an actor pool needs a class (it builds one instance per actor and calls it "
            "per batch): class MyPredictor: def __init__(self, model): ...; def __call__(self, batch): ...",
        )
    model_bytes = inference.torchscript_bytes(checkpoint)
    # Rows come back in the order they went in: the comparison pairs each prediction with its own digit
    # (two blocks may otherwise finish in either order, and two digits of one label swap places).
    context = ray.data.DataContext.get_current()
    kept_order = context.execution_options.preserve_order
    context.execution_options.preserve_order = True
    ds = inference.images_dataset(np.asarray(images), np.asarray(labels), blocks=2)
    pool = inference.pool_for(1)  # one actor, with a GPU share where the cluster has GPUs
    scored = ds.map_batches(
        predictor,
        fn_constructor_kwargs={"model": model_bytes},
        compute=ray.data.ActorPoolStrategy(size=pool.size),
        batch_size=32,
        batch_format="numpy",
        **pool.actor_options(),
    )
    try:
        batches = list(scored.iter_batches(batch_size=None, batch_format="numpy"))
    except Exception as error:  # the learner's class failed inside the actor: say where, in one line
        raise _wrong(
            exercise,
            f"your class raised inside the pool's actor: {type(error).__name__}: "
            f"{str(error).strip().splitlines()[-1][:300]}",
        ) from None
    finally:
        context.execution_options.preserve_order = kept_order
    out = {k: np.concatenate([b[k] for b in batches]) for k in batches[0]} if batches and batches[0] else None
    model = inference.load_torchscript(model_bytes, torch.device("cpu"))
    with torch.inference_mode():
        probabilities = torch.softmax(model(inference.to_model_input(np.asarray(images))), dim=1)
    confidence, expected = probabilities.max(dim=1)
    problems = predictor_problems(out, labels, expected.numpy(), confidence.numpy())
    if problems:
        raise _ran_but(exercise, problems)
    return _right(
        exercise,
        f"your class scored {len(labels)} digits in a Ray Data actor pool; mean confidence "
        f"{float(np.mean(out['confidence'])):.3f}, lowest {float(np.min(out['confidence'])):.3f}.",
    )


# --------------------------------------------------------------------------- lesson 06


def check_inside(inside: Any, exercise: str = "06.1") -> None:
    """``inside(path, root)``: True only for paths strictly under ``root``, after resolving ``..``."""
    if _pending(exercise, inside):
        return None
    if not callable(inside):
        raise _wrong(exercise, "the answer should be a function inside(path, root) -> bool.")
    root = "/srv/course/storage"
    cases = [
        (f"{root}/lesson02", True, "a run folder inside the root"),
        (f"{root}/a/b/c", True, "a nested folder"),
        (root, False, "the root itself (deleting it would remove other people's runs too)"),
        (f"{root}/../data", False, "a path that climbs out with '..'"),
        (f"{root}-old/run", False, "a sibling folder whose name merely starts with the root's"),
        ("/etc", False, "a folder elsewhere"),
    ]
    for path, expected, what in cases:
        got = inside(path, root)
        if bool(got) != expected:
            raise _wrong(
                exercise,
                f"inside({path!r}, {root!r}) returned {got!r} for {what}; expected {expected}. "
                "Compare whole path components after normalising (os.path.normpath / Path.is_relative_to).",
            )
    return _right(exercise, "only paths strictly inside the root pass, however they are written.")


CHECKS: dict[str, Callable[..., bool]] = {
    "01.1": check_steps_per_epoch,
    "01.2": check_safe_loader,
    "02.1": check_per_worker_batch,
    "02.2": check_scaling_config,
    "03.1": check_batch_transform,
    "04.1": check_failure_config,
    "04.2": check_checkpoint_config,
    "04.3": check_resume_epoch,
    "05.1": check_accuracy_fn,
    "06.1": check_inside,
}
