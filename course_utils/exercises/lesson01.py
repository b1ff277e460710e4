"""Exercises of lesson 01: steps per epoch, and a checkpoint loader that refuses code."""

from __future__ import annotations

import math
import pickle
import tempfile
from pathlib import Path
from typing import Any

from course_utils.core.config import temporary_env
from course_utils.core.model import build_resnet18
from course_utils.exercises.checks import correct, not_attempted, wrong


def check_steps_per_epoch(answer: Any, dataset_size: int, batch_size: int, exercise: str = "01.1") -> None:
    """How many optimizer steps one epoch takes: a DataLoader keeps the last, smaller batch."""
    if not_attempted(exercise, answer):
        return None
    expected = math.ceil(dataset_size / batch_size)
    if not isinstance(answer, int | float) or isinstance(answer, bool):
        raise wrong(
            exercise, f"the answer should be a number of steps, got {type(answer).__name__} {answer!r}."
        )
    if answer == dataset_size // batch_size and answer != expected:
        raise wrong(
            exercise,
            f"{answer} leaves out the last, smaller batch: a DataLoader keeps it unless drop_last=True, so "
            f"{dataset_size:,} / {batch_size} = {dataset_size / batch_size:.2f} rounds up.",
        )
    if answer != expected:
        raise wrong(
            exercise,
            f"{answer} is not it. One step trains on one batch; count how many batches of {batch_size} "
            f"it takes to cover {dataset_size:,} images.",
        )
    return correct(
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

    if not_attempted(exercise, load):
        return None
    if not callable(load):
        raise wrong(exercise, f"the answer should be a function taking a path, got {type(load).__name__}.")
    with tempfile.TemporaryDirectory() as tmp:
        good, evil = Path(tmp) / "model.pt", Path(tmp) / "evil.pt"
        weights = build_resnet18().state_dict()
        torch.save(weights, good)
        with open(evil, "wb") as f:
            pickle.dump({"conv1.weight": _Payload()}, f, protocol=2)  # torch.load's own protocol
        loaded = load(good)
        if not isinstance(loaded, dict) or set(loaded) != set(weights):
            raise wrong(exercise, "load(path) should return the saved state_dict (a dict of tensors).")
        if not torch.equal(loaded["conv1.weight"], weights["conv1.weight"]):
            raise wrong(exercise, "the tensors you return are not the saved ones.")
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
                raise wrong(
                    exercise,
                    f"your loader ran code hidden inside the file (with {label}). Pass weights_only=True to "
                    "torch.load yourself, so it only unpickles tensors and plain containers on every PyTorch "
                    "version, not just where the default happens to be safe.",
                )
    return correct(
        exercise, "it loads weights and refuses a file that would run code, whatever torch.load's default is."
    )


_FORCE_UNSAFE_DEFAULT = "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"  # torch's switch: default weights_only=False
_OLD_DEFAULT = "PyTorch < 2.6's default, weights_only=False"
