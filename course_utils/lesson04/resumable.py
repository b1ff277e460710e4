"""What lesson 04's mid-epoch loop (section 12) is checked and drawn with: nothing of it runs inside the loop.

The loop (``course_utils.lesson_code.train_loop_mid_epoch``, written in lesson 04's #@save cell) checkpoints
the place of a ``torchdata`` ``StatefulDataLoader``, so a restarted worker group continues at the exact next
batch (Ray Data's iterator-state resumption is not in open-source Ray). Every row it reports says where its
attempt began and when it first stepped; ``attempts`` reads the attempts back from those rows after the fit,
and ``expected_indices`` is the order an uninterrupted run trains in, from the sampler alone.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pandas as pd
from torch.utils.data import DistributedSampler

ATTEMPT_COLUMNS = ["start_epoch", "start_step", "first_step_at"]


def with_attempts(rows: Iterable[dict[str, Any]] | pd.DataFrame) -> pd.DataFrame:
    """The rows a mid-epoch run reported (a metric history, or a checkpoint's ``history``) as a DataFrame
    with an ``attempt`` column (from 1, in the order the attempts began)."""
    frame = pd.DataFrame(rows if isinstance(rows, pd.DataFrame) else list(rows))
    missing = [c for c in [*ATTEMPT_COLUMNS, "world_size"] if c not in frame.columns]
    if missing:
        raise ValueError(f"these rows were not reported by lesson 04's mid-epoch loop: no {missing}")
    # one attempt per (start, first step), numbered in the order the rows were reported
    frame["attempt"] = frame.groupby(ATTEMPT_COLUMNS, sort=False, dropna=False).ngroup() + 1
    return frame


def attempts(rows: Iterable[dict[str, Any]] | pd.DataFrame) -> pd.DataFrame:
    """One row per attempt of a mid-epoch run, in order, from the rows it reported: ``attempt``,
    ``world_size``, ``start_epoch``, ``start_step`` and ``first_step_at`` (seconds since the Unix epoch).
    An attempt that failed before it reported anything left no row, so it is not here."""
    frame = with_attempts(rows)
    columns = ["attempt", "world_size", *ATTEMPT_COLUMNS]
    return frame.drop_duplicates("attempt")[columns].reset_index(drop=True)


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
