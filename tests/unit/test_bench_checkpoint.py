"""The checkpoint benchmark's arithmetic, on a made-up history: no Ray, nothing timed."""

from __future__ import annotations

import pandas as pd
import pytest

from maintainer_tools.bench.checkpoint import overhead


def _rows(sync_wait: float, async_wait: float) -> pd.DataFrame:
    rows = []
    for epoch in range(3):  # 4 saves per epoch, alternating; the last one is the epoch end
        for i, step in enumerate((4, 8, 12, 16)):
            mode = "sync" if (epoch * 4 + i) % 2 == 0 else "async"
            wait = sync_wait if mode == "sync" else async_wait
            end = step == 16
            mid_waits = 2 * sync_wait + async_wait  # steps 4, 8, 12: sync, async, sync
            rows.append(
                {
                    "epoch": epoch,
                    "step": step,
                    "upload": mode,
                    "checkpoint_s": wait,
                    "epoch_time_s": 10.0 + mid_waits if end else None,
                }
            )
    return pd.DataFrame(rows)


def test_overhead_takes_out_the_mid_epoch_waits_and_skips_warm_up():
    out = overhead(_rows(sync_wait=0.5, async_wait=0.05))
    assert out["saves_per_epoch"] == 4
    assert out["epoch_training_s"] == pytest.approx(10.0)
    assert out["sync_wait_per_save_s"] == pytest.approx(0.5)
    assert out["sync_checkpoint_overhead_pct"] == pytest.approx(100 * 2.0 / 12.0)
    assert out["async_checkpoint_overhead_pct"] == pytest.approx(100 * 0.2 / 10.2)
    assert list(out)[-2:] == ["sync_checkpoint_overhead_pct", "async_checkpoint_overhead_pct"]
