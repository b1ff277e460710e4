"""What lesson 04's loops need besides their own code, and what the tests read from their runs.

Lesson 04 writes its loops in #@save cells (``course_utils.lesson_code``); the mid-epoch one
checkpoints the position of a ``torchdata`` ``StatefulDataLoader``, so a restarted worker group
continues at the exact next batch (Ray Data's iterator-state resumption is not in open-source
Ray). ``RunRecord`` is that loop's bookkeeping, kept in its checkpoints so a learner and the
tests can *see* the resumption. This module imports nothing of ``training``, which imports the loops.
"""

from __future__ import annotations

import os
import time
from typing import Any

import torch
from torch.utils.data import Dataset, DistributedSampler


class IndexRecorder(Dataset):
    """Wraps a map-style dataset and remembers which indices were read, in order (with
    ``num_workers=0``: exactly what this rank trained on since the last ``take()``)."""

    def __init__(self, dataset: Dataset):
        self.dataset = dataset
        self.seen: list[int] = []

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int):
        self.seen.append(int(index))
        return self.dataset[index]

    def take(self) -> list[int]:
        """The indices read since the last call, and forget them."""
        out, self.seen = self.seen, []
        return out


def _gather(values: list[int]) -> list[list[int]]:
    """Every rank's list, in rank order (all ranks must call this together)."""
    dist = torch.distributed
    if not dist.is_available() or not dist.is_initialized():
        return [values]
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, values)
    return out


def check_world_size(state: dict[str, Any], world: int) -> None:
    """Raise unless a mid-epoch checkpoint was saved by as many workers as this attempt has: each
    rank's shard of an epoch depends on the world size, so a loader position means nothing with another."""
    if state["world_size"] != world:
        raise RuntimeError(
            f"The mid-epoch checkpoint was saved by {state['world_size']} workers, this attempt has "
            f"{world}: each rank's shard of the epoch differs, so it cannot continue mid-epoch. Use a "
            "fixed num_workers with mid-epoch checkpoints, or resume from an epoch-boundary checkpoint."
        )


class RunRecord:
    """The mid-epoch loop's bookkeeping: nothing of it changes training, all of it shows the resumption.

    ``seen`` ([epoch][rank] -> indices, in the order trained) and ``attempts`` (one row per worker-group
    start: pid, world size, where it started, when it first stepped) travel in every checkpoint.
    """

    def __init__(self) -> None:
        self.seen: list[list[list[int]]] = []
        self.attempts: list[dict[str, Any]] = []
        self._recorder: IndexRecorder | None = None

    def watch(self, dataset: Dataset) -> Dataset:
        """``dataset`` as it is, noting each index read: what this rank trains on."""
        self._recorder = IndexRecorder(dataset)
        return self._recorder

    def start_attempt(self, state: dict[str, Any] | None, world: int, epoch: int, step: int) -> int:
        """Carry on the record a checkpoint's ``state`` holds (``None``: a fresh start) and add this
        attempt, starting at ``(epoch, step)``; returns its number, from 1."""
        if state is not None:
            self.seen, self.attempts = state["seen"], state["attempts"]
        self.attempts.append(
            {
                "attempt": len(self.attempts) + 1,
                "pid": os.getpid(),
                "world_size": world,
                "start_epoch": epoch,
                "start_step": step,
                "started_at": time.time(),
                "first_step_at": None,
            }
        )
        return len(self.attempts)

    def stepped(self) -> None:
        """Note when this attempt's first step ran (the recovery bench measures to it)."""
        if self.attempts[-1]["first_step_at"] is None:
            self.attempts[-1]["first_step_at"] = time.time()

    def kept(self, epoch: int) -> dict[str, Any]:
        """What a checkpoint keeps of the record: every rank's indices read since the last save
        (gathered: all ranks call this together) and the attempts."""
        read = self._recorder.take() if self._recorder is not None else []
        gathered = _gather(read)
        while len(self.seen) <= epoch:
            self.seen.append([[] for _ in gathered])
        for rank, indices in enumerate(gathered):
            self.seen[epoch][rank].extend(indices)
        return {"seen": self.seen, "attempts": self.attempts}


def expected_indices(train_size: int, world: int, epochs: int, seed: int = 0) -> list[list[list[int]]]:
    """[epoch][rank] -> the sample indices an uninterrupted run trains on, from the sampler alone."""
    out = []
    for epoch in range(epochs):
        ranks = []
        for rank in range(world):
            sampler = DistributedSampler(
                range(train_size), num_replicas=world, rank=rank, shuffle=True, seed=seed
            )
            sampler.set_epoch(epoch)
            ranks.append(list(sampler))
        out.append(ranks)
    return out


def attempts_frame(state: dict[str, Any]):
    """The attempts recorded in a mid-epoch checkpoint's state, as a DataFrame."""
    import pandas as pd

    return pd.DataFrame(state["attempts"])
