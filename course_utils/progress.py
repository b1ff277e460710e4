"""A progress bar for ``trainer.fit()``, on the driver.

``fit()`` blocks for tens of seconds. The run's ``history.ReportLog`` callback writes every report
to the run folder as the controller receives it; ``fit_progress`` reads that file on a driver
thread twice a second and moves a tqdm bar (one tick per report) with the latest loss and
accuracy. A restored run starts the bar at the reports its earlier trainers made.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from tqdm.auto import tqdm

from course_utils import history, polling, slots

SHOWN = ("train_loss", "accuracy", "step", "world_size")  # what the bar's postfix shows, when reported


def _postfix(row: dict[str, Any]) -> dict[str, Any]:
    out = {"epoch": row.get("epoch")}
    for key in SHOWN:
        if row.get(key) is not None:
            out[key] = round(row[key], 4) if isinstance(row[key], float) else row[key]
    return out


@contextlib.contextmanager
def fit_progress(
    trainer: Any, total: int | None = None, desc: str | None = None, every_s: float = 0.5
) -> Iterator[Any]:
    """``with fit_progress(trainer, total=epochs): result = trainer.fit()`` shows a bar of reports.

    On a shared cluster whose free slots cannot hold the run yet, it first waits for them, saying so
    on one line (``slots.wait_for_slots``).

    The trainer's ``RunConfig(callbacks=[...])`` must hold a ``history.ReportLog``: it is what
    the bar reads. ``total`` is the number of reports the run will make (epochs, for the course
    loops), ``None`` when unknown.
    """
    config = trainer.run_config
    if not any(isinstance(c, history.ReportLog) for c in config.callbacks or []):
        raise ValueError(
            "fit_progress reads the run's ReportLog: add history.ReportLog() to RunConfig(callbacks=[...])."
        )
    waited = slots.wait_for_slots(
        trainer.scaling_config
    )  # a busy shared cluster: one line, not Ray's silence
    fs, folder = history.run_folder(config.storage_path, config.storage_filesystem, config.name)
    before = len(history.read_reports(fs, folder) or [])
    bar = tqdm(total=total, initial=before, desc=desc or config.name, unit="report")
    bar.slots_waited_s = waited  # what bench workshop reports per learner
    seen = before

    def follow() -> None:
        nonlocal seen
        try:
            rows = history.read_reports(fs, folder) or []
        except OSError:  # caught mid-rewrite (S3 moves are copy + delete): the next poll reads it
            rows = []
        if len(rows) > seen:
            bar.update(len(rows) - seen)
            bar.set_postfix(_postfix(rows[-1]))
            seen = len(rows)

    try:
        with polling.every(follow, every_s, "fit-progress"):
            yield bar
    finally:
        bar.close()
