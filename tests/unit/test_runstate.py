"""course_utils.internals.runstate against a recorded /api/train/v2/runs/v1 answer (Ray 2.58, local Ray).

Recorded in one driver: a 2-worker run "inspect-retry" whose rank 1 raised once (max_failures=1: a
failed attempt, then a finished one), then "inspect-hang" (rank 1 skipped a report: one attempt,
errored by RAY_TRAIN_COLLECTIVE_TIMEOUT_S).
"""

import io
import json
import urllib.error
from pathlib import Path

import pytest

from course_utils.internals import runstate

RESPONSE = json.loads((Path(__file__).parent / "data" / "inspect" / "train_runs_v1.json").read_text())


def test_retried_run_has_two_attempts_the_first_failed():
    state = runstate.run_state("inspect-retry", RESPONSE)
    assert state.runs[["name", "status", "attempts"]].values.tolist() == [["inspect-retry", "FINISHED", 2]]
    assert state.attempts["status"].tolist() == ["ERRORED", "FINISHED"]
    assert state.attempts["attempt"].tolist() == [1, 2]
    assert state.attempts["error"].iloc[0] == "RuntimeError: injected"
    assert state.attempts["error"].isna().tolist() == [False, True]
    assert state.attempts["started"].is_monotonic_increasing
    assert (state.attempts["duration_s"] > 0).all()


def test_workers_per_attempt_with_rank_and_pid():
    workers = runstate.run_state("inspect-retry", RESPONSE).workers
    assert workers.groupby("attempt")["world_rank"].apply(list).to_dict() == {1: [0, 1], 2: [0, 1]}
    # a restart is a new worker group: new processes
    assert set(workers[workers.attempt == 1].pid).isdisjoint(workers[workers.attempt == 2].pid)
    assert workers["status"].eq("DEAD").all()  # recorded after the runs ended


def test_all_runs_oldest_first_and_errors_short():
    state = runstate.run_state(response=RESPONSE)
    assert state.runs["name"].tolist() == ["inspect-retry", "inspect-hang"]
    assert state.runs["run"].tolist() == [1, 2]
    hang = state.runs.set_index("name").loc["inspect-hang"]
    assert hang.status == "ERRORED"
    assert hang.error.startswith("BroadcastCollectiveTimeoutError: The collective operation timed out")


def test_filters_by_job_and_unknown_name():
    assert runstate.run_state("inspect-retry", RESPONSE, job_id="ffffffff").runs.empty
    assert len(runstate.run_state("inspect-retry", RESPONSE, job_id="01000000").runs) == 1
    empty = runstate.run_state("no-such-run", RESPONSE)
    assert empty.runs.empty and empty.attempts.empty and empty.workers.empty
    assert list(empty.attempts.columns) == [
        "run",
        "attempt",
        "status",
        "workers",
        "started",
        "duration_s",
        "error",
    ]


def test_live_workers_are_the_latest_attempts():
    live = runstate.live_workers("inspect-retry", RESPONSE)
    assert live["attempt"].tolist() == [2, 2] and live["world_rank"].tolist() == [0, 1]


def test_fetch_explains_a_missing_state_actor(monkeypatch):
    text = 'Train state data is not available. ... setting the RAY_TRAIN_ENABLE_STATE_TRACKING environment variable to "1".'

    def refuse(url, timeout):
        raise urllib.error.HTTPError(url, 500, "Internal Server Error", {}, io.BytesIO(text.encode()))

    monkeypatch.setattr(runstate.urllib.request, "urlopen", refuse)
    with pytest.raises(runstate.TrainStateUnavailable) as err:
        runstate.fetch_runs("http://127.0.0.1:8265")
    assert "500" in str(err.value) and "RAY_TRAIN_ENABLE_STATE_TRACKING=1" in str(err.value)


def test_fetch_reads_the_endpoint(monkeypatch):
    seen = []

    class Answer(io.BytesIO):
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    def answer(request, timeout):
        seen.append(request.full_url)
        return Answer(json.dumps(RESPONSE).encode())

    monkeypatch.setattr(runstate.urllib.request, "urlopen", answer)
    assert runstate.fetch_runs("http://127.0.0.1:8265/") == RESPONSE
    assert seen == ["http://127.0.0.1:8265/api/train/v2/runs/v1"]


def test_fetch_without_dashboard(monkeypatch):
    def down(url, timeout):
        raise urllib.error.URLError("Connection refused")

    monkeypatch.setattr(runstate.urllib.request, "urlopen", down)
    with pytest.raises(runstate.TrainStateUnavailable, match="cannot reach the Ray dashboard"):
        runstate.fetch_runs("http://127.0.0.1:1")


def test_the_driver_is_who_reads_state_tracking(monkeypatch, tmp_path):
    """Train V2 reads RAY_TRAIN_ENABLE_STATE_TRACKING in the driver, when fit() builds the controller's callbacks:
    start_ray's setting of the driver's environment is what turns the run table on (no Ray needed to check)."""
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    from course_utils.core import session

    assert session.COURSE_ENV[runstate.STATE_TRACKING_ENV] == "1"
    trainer = TorchTrainer(
        lambda config: None,
        scaling_config=ScalingConfig(num_workers=1),
        run_config=RunConfig(name="state-tracking", storage_path=str(tmp_path)),
    )
    names = {}
    for value in ("1", "0"):
        monkeypatch.setenv(runstate.STATE_TRACKING_ENV, value)
        names[value] = [type(callback).__name__ for callback in trainer._create_default_callbacks()]
    assert "StateManagerCallback" in names["1"] and "StateManagerCallback" not in names["0"]
