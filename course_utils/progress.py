"""A progress bar for ``trainer.fit()``, on the driver.

``fit()`` blocks for tens of seconds. The run's ``history.ReportLog`` callback writes every report
to the run folder as the controller receives it; ``fit_progress`` reads that file on a driver
thread twice a second and moves a tqdm bar (one tick per report) with the latest loss and
accuracy. A restored run starts the bar at the reports its earlier trainers made.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

from course_utils import bars, history, polling, session, slots

SHOWN = ("train_loss", "accuracy", "step", "world_size")  # what the bar's postfix shows, when reported
WAIT_CHECK_S = 3.0  # before the first report, how often to ask whether the run waits for slots


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
    loops), ``None`` when unknown. When ``fit()`` raises, the bar's label says so: it stays where the
    run stopped, short of its total.
    """
    config = trainer.run_config
    if not any(isinstance(c, history.ReportLog) for c in config.callbacks or []):
        raise ValueError(
            "fit_progress reads the run's ReportLog: add history.ReportLog() to RunConfig(callbacks=[...])."
        )
    # A busy shared cluster: one line, not Ray's silence.
    waited = slots.wait_for_slots(trainer.scaling_config)
    session.ready_for_fits()  # the controller's first request to Ray's autoscaling coordinator finds it up
    fs, folder = history.run_folder(config.storage_path, config.storage_filesystem, config.name)
    before = len(history.read_reports(fs, folder) or [])
    bar = bars.bar(total=total, initial=before, desc=desc or config.name, unit="report")
    bar.slots_waited_s = waited  # what bench workshop reports per learner
    seen = before
    label = bar.desc
    started = time.monotonic()
    checked = started  # when the placement group was last looked at
    pending: list[float] = []  # when a look found the run waiting for slots

    def follow() -> None:
        nonlocal seen, checked
        try:
            rows = history.read_reports(fs, folder) or []
        # Caught mid-rewrite (S3 moves are copy + delete; a cut-off read): the next poll reads it.
        except (OSError, ValueError):
            rows = []
        if len(rows) > seen:
            if bar.desc != label:
                bar.set_description_str(label)
            bar.update(len(rows) - seen)
            bar.set_postfix(_postfix(rows[-1]))
            seen = len(rows)
        elif seen == before and time.monotonic() - checked >= WAIT_CHECK_S:
            # No report yet: is the run waiting for slots other runs hold (learners who asked at once)?
            checked = time.monotonic()
            need = slots.pending_need()
            if need:
                import ray

                pending.append(checked)
                line = slots.waiting_line(
                    need, ray.available_resources(), ray.cluster_resources(), checked - started
                )
                bar.set_description_str(line, refresh=True)
            elif need is not None and bar.desc != label:
                bar.set_description_str(label, refresh=True)

    try:
        with polling.every(follow, every_s, "fit-progress"):
            yield bar
    except BaseException:
        # the bar ends where the run stopped: say why it is short of its total
        bar.set_description_str(f"{label} (stopped: fit() raised)")
        raise
    finally:
        if pending:  # waited inside fit() too: from the first look that saw it to one interval after the last
            bar.slots_waited_s = waited + pending[-1] - pending[0] + WAIT_CHECK_S
        bar.close()
