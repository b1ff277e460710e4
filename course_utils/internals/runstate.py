"""Ray Train's own record of a run: its attempts and their workers, from the dashboard, as tables.

With ``RAY_TRAIN_ENABLE_STATE_TRACKING=1`` in the driver's environment at ``fit()``
(``session.start_ray`` sets it), Ray Train V2 records every run, attempt and worker group in a
detached ``TrainStateActor``, and the dashboard serves them at ``/api/train/v2/runs/v1``. The
open-source dashboard has no Train tab: this module reads that endpoint (with the cluster's auth
token, ``dashboard.open_dashboard``) and returns DataFrames.
"""

from __future__ import annotations

import json
import re
import urllib.error
from dataclasses import dataclass
from typing import Any

import pandas as pd

from course_utils.internals import dashboard

RUNS_ENDPOINT = "/api/train/v2/runs/v1"
STATE_TRACKING_ENV = "RAY_TRAIN_ENABLE_STATE_TRACKING"


class TrainStateUnavailable(RuntimeError):
    """The dashboard cannot list Train runs: it is not running, or state tracking was off."""


def fetch_runs(dashboard_url: str | None = None, timeout_s: float = 20.0) -> dict[str, Any]:
    """The dashboard's answer to ``GET /api/train/v2/runs/v1`` (all Train V2 runs of the cluster);
    ``TrainStateUnavailable`` with the reason (no dashboard, or tracking off for every run so far),
    ``dashboard.DashboardAuthError`` when the dashboard refuses the token (a setup problem to fix)."""
    url = (dashboard_url or _dashboard_url()).rstrip("/") + RUNS_ENDPOINT
    try:
        return json.loads(dashboard.open_dashboard(url, timeout_s=timeout_s))
    except dashboard.DashboardHTTPError as err:
        raise TrainStateUnavailable(
            f"{url} answered {err.code}: {err.body} (is {STATE_TRACKING_ENV}=1 set in the "
            "driver's environment before fit()? session.start_ray() sets it)"
        ) from err
    except urllib.error.URLError as err:
        raise TrainStateUnavailable(f"cannot reach the Ray dashboard at {url}: {err.reason}") from err


def _dashboard_url() -> str:
    import ray

    if not ray.is_initialized():
        raise TrainStateUnavailable("Ray is not running in this process: call session.start_ray() first.")
    address = dashboard.dashboard_url()
    if not address:
        raise TrainStateUnavailable(
            "the Ray dashboard is not running (it needs ray[default]), and it is what serves Train's run state"
        )
    return address


def _time(ns: int | None) -> pd.Timestamp | None:
    return pd.Timestamp(ns, unit="ns", tz="UTC") if ns else None


def _seconds(start_ns: int | None, end_ns: int | None) -> float | None:
    return round((end_ns - start_ns) / 1e9, 1) if start_ns and end_ns else None


_EXCEPTION_LINE = re.compile(r"^(?:[A-Za-z_][\w]*\.)*([A-Z]\w*)(: .*)?$")  # pkg.mod.SomeError: message


def _first_error_line(detail: str | None) -> str | None:
    """The exception line of a status detail (its last ``pkg.Name: message`` line), without the module path."""
    if not detail:
        return None
    lines = [line.strip() for line in detail.splitlines() if line.strip()]
    for line in reversed(lines):
        match = _EXCEPTION_LINE.match(line)
        if match and line != "Traceback (most recent call last):":
            return (match.group(1) + (match.group(2) or ""))[:160]
    return lines[-1][:160]


@dataclass(frozen=True)
class _RunState:
    """One or more Train runs (same name: an automatic retry stays one run, a manual restore is a new one)."""

    runs: pd.DataFrame
    attempts: pd.DataFrame
    workers: pd.DataFrame


def run_state(
    name: str | None = None, response: dict[str, Any] | None = None, job_id: str | None = None
) -> _RunState:
    """The runs called ``name`` (all runs if None), oldest first, with their attempts (numbered from 1
    in start order; ``error``: a failed one's exception line) and workers. ``response``: ``fetch_runs()``'s
    answer (fetched when None); ``job_id`` keeps one driver's runs (another learner may use the name)."""
    response = fetch_runs() if response is None else response
    runs = [
        r
        for r in response.get("train_runs", [])
        if (name is None or r["name"] == name) and (job_id is None or r["job_id"] == job_id)
    ]
    runs.sort(key=lambda r: r["start_time_ns"])
    run_rows, attempt_rows, worker_rows = [], [], []
    for run_no, run in enumerate(runs, start=1):
        attempts = sorted(run.get("attempts", []), key=lambda a: a["start_time_ns"])
        run_rows.append(
            {
                "run": run_no,
                "name": run["name"],
                "run_id": run["id"][:8],
                "status": run["status"],
                "attempts": len(attempts),
                "started": _time(run["start_time_ns"]),
                "duration_s": _seconds(run["start_time_ns"], run.get("end_time_ns")),
                "error": _first_error_line(run.get("status_detail")),
            }
        )
        for attempt_no, attempt in enumerate(attempts, start=1):
            workers = sorted(attempt.get("workers", []), key=lambda w: w["world_rank"])
            attempt_rows.append(
                {
                    "run": run_no,
                    "attempt": attempt_no,
                    "status": attempt["status"],
                    "workers": len(workers),
                    "started": _time(attempt["start_time_ns"]),
                    "duration_s": _seconds(attempt["start_time_ns"], attempt.get("end_time_ns")),
                    "error": _first_error_line(attempt.get("status_detail")),
                }
            )
            for worker in workers:
                worker_rows.append(
                    {
                        "run": run_no,
                        "attempt": attempt_no,
                        "world_rank": worker["world_rank"],
                        "local_rank": worker["local_rank"],
                        "node_ip": worker["node_ip"],
                        "pid": worker["pid"],
                        "actor_id": worker["actor_id"],
                        "node_id": worker["node_id"],
                        "status": worker.get("status"),
                        "gpu_ids": worker.get("gpu_ids", []),
                    }
                )
    columns = {
        "runs": ["run", "name", "run_id", "status", "attempts", "started", "duration_s", "error"],
        "attempts": ["run", "attempt", "status", "workers", "started", "duration_s", "error"],
        "workers": [
            "run",
            "attempt",
            "world_rank",
            "local_rank",
            "node_ip",
            "pid",
            "actor_id",
            "node_id",
            "status",
        ],
    }
    return _RunState(
        runs=pd.DataFrame(run_rows, columns=columns["runs"]),
        attempts=pd.DataFrame(attempt_rows, columns=columns["attempts"]),
        workers=pd.DataFrame(worker_rows, columns=columns["workers"] + ["gpu_ids"]),
    )


def live_workers(
    name: str, response: dict[str, Any] | None = None, job_id: str | None = None
) -> pd.DataFrame:
    """The workers of the latest attempt of the newest run called ``name`` (rank, pid, node, actor id)."""
    state = run_state(name, response, job_id)
    if state.attempts.empty:
        return state.workers
    last = state.attempts.iloc[-1]
    workers = state.workers
    return workers[(workers["run"] == last["run"]) & (workers["attempt"] == last["attempt"])].reset_index(
        drop=True
    )
