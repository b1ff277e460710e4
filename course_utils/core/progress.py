"""A fit's progress, shown while ``trainer.fit()`` blocks: its bar, its wait for free slots, its polling.

``fit()`` blocks for tens of seconds. The run's ``history.ReportLog`` callback writes every report
to the run folder as the controller receives it; ``fit_progress`` reads that file on a driver
thread twice a second (``every``) and moves a tqdm bar (one tick per report) with the latest loss
and accuracy. A restored run starts the bar at the reports its earlier trainers made.

On a cluster that other learners use, a fit may ask for more CPU (or GPU) slots than are free at
that moment, and Ray Train then waits for them without a word. ``wait_for_slots``, called by
``fit_progress`` before ``fit()``, says it first, on one line it updates while it waits: how many
slots the run needs, how many are free, and that the run starts when other runs finish (an elastic
run needs only its minimum). Learners who start at the same moment all find the slots free, and the
last to ask then waits inside ``fit()`` for its placement group (Ray Train's reservation of the
workers' slots): ``pending_need`` finds that wait through Ray's state API, so the bar shows the same
line. ``wait_for_free`` does the same for anything that is not a fit (batch inference's pool).

``progress_bar`` is tqdm's, made so that a saved notebook shows where a bar ended, not where it began.
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Callable, Iterator
from typing import Any

from course_utils.core import history, session
from course_utils.internals import dashboard, metrics
from course_utils.internals.periodic import every


# In JupyterLab a tqdm bar is a widget; a saved notebook also keeps its text form, which GitHub's
# viewer, nbviewer and ``nbconvert --to markdown`` show. tqdm writes that text once, when the bar first
# appears ("0/3"). ``progress_bar`` displays the widget under a display id and, when the bar closes, updates that
# output with its final text (``3/3 [00:21<00:00, ...]``; nothing for a bar that does not stay,
# ``leave=False``), so every reader sees what JupyterLab showed. Outside a notebook it is tqdm.auto's own.
def progress_bar(*args: Any, **kwargs: Any) -> Any:
    """``tqdm.auto.tqdm(*args, **kwargs)``; in a notebook, one whose saved text is its final state."""
    from tqdm.auto import tqdm
    from tqdm.notebook import tqdm_notebook

    if not issubclass(tqdm, tqdm_notebook):
        return tqdm(*args, **kwargs)
    return _saved_bar_class()(*args, **kwargs)


@functools.cache
def _saved_bar_class() -> type:
    from IPython.display import display
    from tqdm.notebook import tqdm_notebook

    class SavedBar(tqdm_notebook):
        """tqdm's notebook bar, displayed under a display id that ``close`` updates."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            shown = kwargs.pop("display", True)
            super().__init__(*args, display=False, **kwargs)
            self._handle = None
            if shown and not self.disable and self.delay <= 0:
                self._handle = display(self.container, display_id=True)
                self.displayed = True

        def close(self) -> None:
            handle, self._handle = getattr(self, "_handle", None), None
            super().close()
            if handle is None:
                return
            failed = bool(self.total) and self.n < self.total
            if self.leave or failed:
                bundle = dict(self.container._repr_mimebundle_())
                bundle["text/plain"] = self.container.__repr__(pretty=True)  # the bar as it ends
            else:
                bundle = {"text/plain": ""}  # a bar that does not stay leaves no text
            handle.update(bundle, raw=True)

    return SavedBar


def needed(scaling_config: Any) -> dict[str, float]:
    """The slots a fit with ``scaling_config`` must find free to start: per worker x minimum workers."""
    low, _ = session.worker_count_bounds(scaling_config.num_workers)
    return {
        name: amount * low for name, amount in session.resources_per_worker(scaling_config).items() if amount
    }


def short_of(need: dict[str, float], free: dict[str, float]) -> dict[str, float]:
    """The resources of ``need`` that ``free`` cannot cover now (empty when the run can start)."""
    return {name: amount for name, amount in need.items() if free.get(name, 0.0) + 1e-9 < amount}


def waiting_line(
    need: dict[str, float],
    free: dict[str, float],
    total: dict[str, float],
    waited_s: float,
    what: str = "this run",
) -> str:
    """``waiting for 2 CPU slots: 1 of 4 free, in use by other runs; this run starts when they finish (12 s)``.

    ``what`` names who waits ("this run" for a fit, "this pool" for batch inference's model actors).
    """
    parts = [
        f"{need[name]:g} {name} slot{'s' if need[name] != 1 else ''}: {free.get(name, 0.0):g} of "
        f"{total.get(name, 0.0):g} free"
        for name in short_of(need, free)
    ]
    return (
        f"waiting for {'; '.join(parts)}, in use by other runs on this cluster; "
        f"{what} starts when they finish ({waited_s:.0f} s)"
    )


def wait_for_slots(
    scaling_config: Any,
    poll_s: float = 1.0,
    quiet_s: float = 5.0,
    *,
    free: Callable[[], dict[str, float]] | None = None,
    total: Callable[[], dict[str, float]] | None = None,
) -> float:
    """Return once the cluster has the slots ``scaling_config`` needs free; the seconds waited.

    Silent when they are free within ``quiet_s`` (a run that just ended gives its slots back a
    moment after its ``fit()`` returned). Otherwise one line (a tqdm bar's description, so a notebook
    updates it in place) says what the run waits for, until it can start. ``free``/``total`` default
    to ``ray.available_resources``/``ray.cluster_resources`` (tests pass their own).
    """
    return wait_for_free(needed(scaling_config), "this run", poll_s, quiet_s, free=free, total=total)


def wait_for_free(
    need: dict[str, float],
    what: str = "this run",
    poll_s: float = 1.0,
    quiet_s: float = 5.0,
    *,
    free: Callable[[], dict[str, float]] | None = None,
    total: Callable[[], dict[str, float]] | None = None,
) -> float:
    """Return once ``need`` (e.g. ``{"CPU": 1, "GPU": 0.5}``) is free on the cluster; the seconds waited.

    ``wait_for_slots`` for anything that is not a fit: batch inference's pool, a model actor. It
    holds nothing while it waits, so a learner never sits on slots another learner waits for.
    """
    import ray

    if free is None and not ray.is_initialized():
        return 0.0  # fit() starts a local Ray of its own: nothing else runs there
    free = free or ray.available_resources
    total = total or ray.cluster_resources
    now = free()
    started = time.monotonic()
    # Slots a run that just ended held come back a moment after its fit() returned: wait quietly first.
    while short_of(need, now) and time.monotonic() - started < quiet_s:
        time.sleep(min(poll_s, 0.5))
        now = free()
    if not short_of(need, now):
        return time.monotonic() - started
    bar = progress_bar(
        total=None, desc=waiting_line(need, now, total(), 0.0, what), bar_format="{desc}", leave=True
    )
    try:
        while short_of(need, now):
            time.sleep(poll_s)
            now = free()
            bar.set_description_str(
                waiting_line(need, now, total(), time.monotonic() - started, what), refresh=True
            )
        waited = time.monotonic() - started
        bar.set_description_str(f"slots free after {waited:.0f} s of waiting: {what} starts", refresh=True)
        return waited
    finally:
        bar.close()


def pending_need() -> dict[str, float] | None:
    """The resources of this job's placement groups still waiting for slots (Ray's state API:
    ``PENDING`` groups whose creator is this driver's job, which Ray Train's controller is part of);
    ``{}`` when none waits, None when the state API cannot answer (no dashboard)."""
    import ray
    from ray.util.state import list_placement_groups

    try:
        groups = list_placement_groups(
            address=dashboard.state_address(),
            filters=[
                ("state", "=", "PENDING"),
                ("creator_job_id", "=", ray.get_runtime_context().get_job_id()),
            ],
            detail=True,
            raise_on_missing_output=False,
        )
    except Exception:  # no dashboard (StateApiUnavailable), or a state API that cannot answer: no line
        return None
    need: dict[str, float] = {}
    for group in groups:
        for bundle in group.bundles or []:
            for name, amount in (bundle.get("unit_resources") or {}).items():
                need[name] = need.get(name, 0.0) + float(amount)
    return need


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
    trainer: Any,
    total: int | None = None,
    desc: str | None = None,
    every_s: float = 0.5,
    utilization: bool = False,
) -> Iterator[Any]:
    """``with fit_progress(trainer, total=epochs): result = trainer.fit()`` shows a bar of reports.

    On a shared cluster whose free slots cannot hold the run yet, it first waits for them, saying so
    on one line (``wait_for_slots``).

    The trainer's ``RunConfig(callbacks=[...])`` must hold a ``history.ReportLog``: it is what
    the bar reads. ``total`` is the number of reports the run will make (epochs, for the course
    loops), ``None`` when unknown. When ``fit()`` raises, the bar's label says so: it stays where the
    run stopped, short of its total. ``utilization=True`` also samples every node meanwhile
    (``metrics.sample_metrics``): the bar's ``utilization`` holds the samples.
    """

    config = trainer.run_config
    if not any(isinstance(c, history.ReportLog) for c in config.callbacks or []):
        raise ValueError(
            "fit_progress reads the run's ReportLog: add history.ReportLog() to RunConfig(callbacks=[...])."
        )
    # A busy shared cluster: one line, not Ray's silence.
    waited = wait_for_slots(trainer.scaling_config)
    session.ready_for_fits()  # the controller's first request to Ray's autoscaling coordinator finds it up
    fs, folder = history.run_folder(config.storage_path, config.storage_filesystem, config.name)
    before = len(history.read_reports(fs, folder) or [])
    # a restored run's bar starts at the reports made before, and says so: "3/3" after one new epoch
    # is then read as "the run's third of three", not "three epochs in this fit"
    name = desc or config.name + (f" (resumed after {before} report(s))" if before else "")
    bar = progress_bar(total=total, initial=before, desc=name, unit="report")
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
            need = pending_need()
            if need:
                import ray

                pending.append(checked)
                line = waiting_line(
                    need, ray.available_resources(), ray.cluster_resources(), checked - started
                )
                bar.set_description_str(line, refresh=True)
            elif need is not None and bar.desc != label:
                bar.set_description_str(label, refresh=True)

    try:
        with contextlib.ExitStack() as beside:
            if utilization:
                bar.utilization = beside.enter_context(metrics.sample_metrics(run_name=config.name))
            beside.enter_context(every(follow, every_s, "fit-progress"))
            yield bar
    except BaseException:
        # the bar ends where the run stopped: say why it is short of its total
        bar.set_description_str(f"{label} (stopped: fit() raised)")
        raise
    finally:
        if pending:  # waited inside fit() too: from the first look that saw it to one interval after the last
            bar.slots_waited_s = waited + pending[-1] - pending[0] + WAIT_CHECK_S
        bar.close()
