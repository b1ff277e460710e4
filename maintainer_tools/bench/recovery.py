"""``python -m maintainer_tools.bench recovery``: seconds from a worker's SIGKILL to the next training
step, and the share of epoch time spent saving checkpoints, for lesson 04's mid-epoch loop
(lesson 04's ``train_loop_mid_epoch``)."""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from pathlib import Path

from course_utils.core import checkpoints, data, session, storage
from course_utils.core.config import get_profile
from course_utils.lesson04 import faults, resumable
from maintainer_tools import fits
from maintainer_tools.bench.common import print_lines


def main(argv: Sequence[str] | None = None) -> dict[str, float]:
    """Kill a worker from outside mid-epoch; time death -> next training step, and checkpoint cost.

    One run of ``train_loop_mid_epoch`` with ``max_failures=1``: rank 1 is SIGKILLed (found
    through Ray's state API) during epoch 1. Prints ``name: value`` lines and ends with the
    share of epoch time spent saving checkpoints.
    """
    parser = argparse.ArgumentParser(
        prog="python -m maintainer_tools.bench recovery",
        description=(main.__doc__ or "").split("\n")[0],
    )
    parser.add_argument("--train-size", type=int, default=2048)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--checkpoint-every", type=int, default=5)
    parser.add_argument("--kill-step", type=int, default=9)
    args = parser.parse_args(argv)

    data.ensure_mnist(verbose=False)
    session.start_ray(verbose=False)
    profile = get_profile().with_(train_size=args.train_size, epochs=args.epochs)
    name = "bench-recovery"
    storage.resolve().reset_run(name)
    marker = Path(storage.resolve().local_output_dir("bench-recovery")) / "kill.marker"
    marker.unlink(missing_ok=True)
    spec = faults.crash_once(marker, rank=1, epoch=1, step=args.kill_step, how="external", delay_s=2.0)
    trainer = fits.make_trainer_mid_epoch(
        name, profile, max_failures=1, checkpoint_every=args.checkpoint_every, fault=spec
    )
    killer = faults.ExternalKiller(spec).start()
    started = time.perf_counter()
    result = trainer.fit()
    wall = time.perf_counter() - started
    killer.join()
    history = resumable.with_attempts(checkpoints.load_state(result.checkpoint)["history"])
    attempts = resumable.attempts(history).to_dict("records")
    if len(attempts) != 2:
        raise RuntimeError(f"Expected 2 attempts (one restart), found {len(attempts)}: {attempts}")
    recovery = attempts[1]["first_step_at"] - killer.killed_at
    first_epoch = history[(history["epoch"] == 0) & (history["attempt"] == 1)]
    per_save = float(first_epoch["checkpoint_s"].dropna().mean())  # a row's wait: where it was recorded
    epoch_time = float(first_epoch["epoch_time_s"].dropna().iloc[0])
    share = per_save * len(first_epoch) / (epoch_time + per_save)  # the end-of-epoch save is outside
    lines = {
        "fit_wall_s": wall,
        "resumed_at_step": attempts[1]["start_step"],
        "kill_to_next_step_s": recovery,
        "checkpoint_save_s": per_save,
        "checkpoints_per_epoch": len(first_epoch),
        "epoch_time_s": epoch_time,
        "checkpoint_share_of_epoch": share,
    }
    print_lines(lines)
    return lines
