"""Training state on disk: rank 0 writes, every rank reports, loads are ``weights_only``.

A checkpoint directory holds ``state.pt`` (everything exact resumption needs) and
``history.json`` (the metric history, readable). It is written into a fresh temp dir and loaded
back once before ``ray.train.report`` gets it: a crash while writing never leaves a reported
checkpoint that fails to load.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from course_utils.core.model import build_resnet18, unwrap

STATE_FILE = "state.pt"
HISTORY_FILE = "history.json"
# A checkpoint's temp folder: course-ckpt-<pid of the process writing it>-<random>. The pid is how a
# later process knows the folder is an orphan (see sweep_orphaned_temp_dirs).
TEMP_PREFIX = "course-ckpt-"


def _pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists on this machine (another user's counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_orphaned_temp_dirs(root: str | Path | None = None) -> list[Path]:
    """Remove the checkpoint temp folders whose writing process is gone; return them.

    A rank 0 killed while ``report`` copies its checkpoint (lesson 04's SIGKILL, a retry, an upload
    pending when a run stops) never deletes its folder (≈ 130 MB for ResNet-18 with Adam). Only
    folders whose pid no longer exists are touched: a live process may still be uploading its own.
    """
    removed = []
    for folder in Path(root or tempfile.gettempdir()).glob(f"{TEMP_PREFIX}*-*"):
        pid = folder.name[len(TEMP_PREFIX) :].split("-", 1)[0]
        if folder.is_dir() and pid.isdigit() and not _pid_alive(int(pid)):
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed


def new_temp_dir() -> Path:
    """A fresh checkpoint temp folder named after this process; orphans of dead processes go first."""
    sweep_orphaned_temp_dirs()
    return Path(tempfile.mkdtemp(prefix=f"{TEMP_PREFIX}{os.getpid()}-"))


class CheckpointError(RuntimeError):
    """A checkpoint that is missing or cannot be loaded; the message names it."""


def rng_state() -> dict[str, Any]:
    """Python, NumPy and torch CPU RNG states in a form ``weights_only`` loads accept."""
    np_state = np.random.get_state()
    return {
        "python": list(random.getstate()[1]),
        "python_pos": random.getstate()[2],
        "numpy_keys": torch.from_numpy(np_state[1].astype(np.int64)),
        "numpy_pos": int(np_state[2]),
        "torch": torch.get_rng_state(),
    }


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what ``rng_state`` captured."""
    random.setstate((3, tuple(state["python"]), state["python_pos"]))
    np.random.set_state(
        ("MT19937", state["numpy_keys"].numpy().astype(np.uint32), state["numpy_pos"], 0, 0.0)
    )
    torch.set_rng_state(state["torch"])


def write_checkpoint_dir(
    state: dict[str, Any],
    directory: str | Path | None = None,
    *,
    before_commit: Callable[[], None] | None = None,
) -> Path:
    """Write ``state`` into ``directory`` (a new temp dir by default), verify it loads, return it.

    ``before_commit`` runs between writing ``state.pt.partial`` and renaming it (fault
    injection: a crash there leaves only the partial file, which nothing ever reports).
    """
    directory = Path(directory or new_temp_dir())
    directory.mkdir(parents=True, exist_ok=True)
    partial = directory / (STATE_FILE + ".partial")
    torch.save(state, partial)
    if before_commit is not None:
        before_commit()
    os.replace(partial, directory / STATE_FILE)
    (directory / HISTORY_FILE).write_text(json.dumps(state.get("history", []), indent=1))
    load_state(directory)  # proves the file is whole before anyone reports it
    return directory


def _checkpoint_dir(source: Any) -> tuple[Path, Any]:
    """(local directory, context manager to keep open) for a path or a ray.train.Checkpoint."""
    if isinstance(source, str | Path):
        return Path(source), None
    ctx = source.as_directory()  # a ray.train.Checkpoint: local path or a download
    return Path(ctx.__enter__()), ctx


def load_state(source: Any, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Load a training state from a checkpoint directory or a ``ray.train.Checkpoint``."""
    directory, ctx = _checkpoint_dir(source)
    try:
        path = directory / STATE_FILE
        if not path.is_file():
            raise CheckpointError(
                f"No {STATE_FILE} in checkpoint {directory}: it is incomplete or not a course checkpoint."
            )
        try:
            return torch.load(path, map_location=map_location, weights_only=True)
        except Exception as exc:
            raise CheckpointError(
                f"Checkpoint {path} cannot be loaded ({type(exc).__name__}: {exc})."
            ) from exc
    finally:
        if ctx is not None:
            ctx.__exit__(None, None, None)


def training_state(
    model: nn.Module, optimizer: torch.optim.Optimizer | None, epoch: int, history: list[dict], **extra: Any
) -> dict[str, Any]:
    """Everything a resumed run needs, with the plain (unwrapped) model weights."""

    state = {
        "model": unwrap(model).state_dict(),
        "epoch": epoch,
        "history": list(history),
        "rng": rng_state(),
        **extra,
    }
    if optimizer is not None:
        state["optimizer"] = optimizer.state_dict()
    return state


@contextlib.contextmanager
def rank0_checkpoint(
    rank: int, state: dict[str, Any] | None, *, before_commit: Callable[[], None] | None = None
) -> Iterator[Any]:
    """On rank 0, ``state`` as a ``ray.train.Checkpoint`` in a fresh temp dir; ``None`` elsewhere.

    Use it around ``ray.train.report(metrics, checkpoint=checkpoint)``: every rank reports
    (``report`` is a barrier), only rank 0 attaches a checkpoint (all ranks hold the same
    weights), and the temp dir is removed once ``report`` has copied it to storage.
    ``before_commit``: as ``write_checkpoint_dir``'s (lesson 04 crashes in the middle of writing).
    """
    import ray.train

    if rank != 0:
        yield None
        return
    directory = new_temp_dir()
    try:  # removed after report, and also when the write itself fails
        write_checkpoint_dir(state, directory, before_commit=before_commit)
        yield ray.train.Checkpoint.from_directory(str(directory))
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def save_wait_s(state: dict[str, Any], destination: str | Path, rounds: int = 3) -> dict[str, float]:
    """Seconds a training step waits for one save of ``state``, best of ``rounds``, both ways, as lesson
    04's mid-epoch loop saves, in this process: ``sync``, ``torch.save`` into a fresh folder and the copy
    into ``destination`` that a synchronous ``report`` waits for (Ray copies to storage that way);
    ``async``, the ``torch.save`` alone (Ray's thread copies the folder while training goes on)."""
    destination = Path(destination)
    best = {"sync": float("inf"), "async": float("inf")}
    for _ in range(rounds):
        for mode in best:
            start = time.perf_counter()
            directory = Path(tempfile.mkdtemp())
            torch.save(state, directory / STATE_FILE)
            if mode == "sync":
                shutil.copytree(directory, destination / directory.name)
            best[mode] = min(best[mode], time.perf_counter() - start)
            shutil.rmtree(directory)
            shutil.rmtree(destination / directory.name, ignore_errors=True)
    return best


def load_model(source: Any, map_location: str | torch.device = "cpu") -> nn.Module:
    """A fresh ResNet-18 with the weights of a checkpoint dir, ``model.pt`` or Checkpoint."""

    if isinstance(source, str | Path) and Path(source).is_file():
        weights = torch.load(source, map_location=map_location, weights_only=True)
    else:
        weights = load_state(source, map_location)["model"]
    model = build_resnet18()
    model.load_state_dict(weights)
    return model.to(map_location).eval()
