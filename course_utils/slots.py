"""Waiting for free slots on a shared cluster, said in plain words.

On a cluster that other learners use, a fit may ask for more CPU (or GPU) slots than are free at
that moment. Ray Train then waits for them without a word to the learner. ``wait_for_slots``,
called by ``progress.fit_progress`` before ``fit()``, says it first, on one line it updates while
it waits: how many slots the run needs, how many are free, and that the run starts when other
runs finish. An elastic run needs only its minimum.

Learners who start at the same moment all find the slots free, and the last to ask then waits
inside ``fit()`` for its placement group (Ray Train's reservation of the workers' slots).
``pending_need`` finds such a wait through Ray's state API (this job's placement groups still
PENDING), so ``fit_progress`` can show the same line while the fit waits.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from course_utils import bars


def needed(scaling_config: Any) -> dict[str, float]:
    """The slots a fit with ``scaling_config`` must find free to start: per worker x minimum workers."""
    from course_utils.session import resources_per_worker, worker_count_bounds

    low, _ = worker_count_bounds(scaling_config.num_workers)
    return {name: amount * low for name, amount in resources_per_worker(scaling_config).items() if amount}


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
    return wait_for(needed(scaling_config), "this run", poll_s, quiet_s, free=free, total=total)


def wait_for(
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
    bar = bars.bar(
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

    from course_utils.session import _state_address

    try:
        groups = list_placement_groups(
            address=_state_address(),
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
