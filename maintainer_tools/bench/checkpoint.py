"""``python -m maintainer_tools.bench checkpoint``: what a checkpoint save costs the training loop,
synchronous vs asynchronous upload (lesson 04), at the mid-epoch loop's save rate.

One run of lesson 04's ``train_loop_mid_epoch`` with ``checkpoint_uploads=["sync", "async"]``:
consecutive saves alternate the two modes, so both are measured on the same workers, data and
storage, side by side. A save's cost is what the training step waited for it (``checkpoint_s``,
from ``report`` being called to it returning); the overhead is that wait times the saves of one
epoch, as a share of an epoch whose saves were all of that mode.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Sequence

import pandas as pd

from course_utils.core import checkpoints, data, session, storage
from course_utils.core.config import get_profile
from maintainer_tools.bench.common import print_lines
from maintainer_tools.fits import make_trainer_mid_epoch


def overhead(rows: pd.DataFrame) -> dict[str, float]:
    """Per-save wait of each mode and its share of the epoch, from the run's checkpoint history.

    ``epoch_time_s`` (epoch-end rows) spans the epoch's steps and its mid-epoch saves, so an
    epoch's training alone is that minus the mid-epoch waits; the epoch-end save comes on top.
    Epoch 0 is left out (warm-up), as is any save without a recorded wait (the run's last).
    """
    steady = rows[rows["epoch"] > rows["epoch"].min()] if rows["epoch"].nunique() > 1 else rows
    saves_per_epoch = len(steady) / steady["epoch"].nunique()
    training = []
    for _, epoch in steady.groupby("epoch"):
        end = epoch[epoch["epoch_time_s"].notna()]
        mid_waits = epoch.loc[epoch["epoch_time_s"].isna(), "checkpoint_s"].fillna(0).sum()
        training.append(float(end["epoch_time_s"].iloc[0]) - float(mid_waits))
    train_s = statistics.median(training)
    out: dict[str, float] = {"saves_per_epoch": saves_per_epoch, "epoch_training_s": train_s}
    waits = {}
    for mode in ("sync", "async"):
        measured = steady.loc[(steady["upload"] == mode) & steady["checkpoint_s"].notna(), "checkpoint_s"]
        waits[mode] = statistics.median(measured) if len(measured) else float("nan")
        out[f"{mode}_wait_per_save_s"] = waits[mode]
    for mode, wait in waits.items():  # the last two lines: sync, then async
        out[f"{mode}_checkpoint_overhead_pct"] = (
            100 * saves_per_epoch * wait / (train_s + saves_per_epoch * wait)
        )
    return out


def main(argv: Sequence[str] | None = None) -> dict[str, float]:
    """Sync vs async checkpoint upload: wait per save and share of the epoch, one run."""
    parser = argparse.ArgumentParser(
        prog="python -m maintainer_tools.bench checkpoint", description=(main.__doc__ or "").split("\n")[0]
    )
    parser.add_argument("--train-size", type=int, default=2048)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument(
        "--checkpoint-every", type=int, default=4, help="steps between saves (lesson 04's rate)"
    )
    args = parser.parse_args(argv)

    data.ensure_mnist(verbose=False)
    session.start_ray(verbose=False, include_dashboard=False)
    name = "bench-checkpoint"
    storage.resolve().reset_run(name)
    profile = get_profile().with_(train_size=args.train_size, epochs=args.epochs)
    trainer = make_trainer_mid_epoch(
        name,
        profile,
        max_failures=0,
        checkpoint_every=args.checkpoint_every,
        checkpoint_uploads=["sync", "async"],
    )
    try:
        result = trainer.fit()
        rows = pd.DataFrame(checkpoints.load_state(result.checkpoint)["history"])
    finally:
        storage.resolve().reset_run(name)
    out = {"train_size": args.train_size, "checkpoint_every_steps": args.checkpoint_every, **overhead(rows)}
    print_lines(out)
    return out
