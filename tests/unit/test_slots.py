"""Waiting for free slots on a busy shared cluster: what the run needs and the one line it shows."""

from __future__ import annotations

import pytest
from ray.train import ScalingConfig

from course_utils.core import progress
from course_utils.internals import dashboard


@pytest.mark.parametrize(
    ("config", "need"),
    [
        (ScalingConfig(num_workers=2), {"CPU": 2}),
        (ScalingConfig(num_workers=(1, 3)), {"CPU": 1}),  # elastic: its minimum
        (ScalingConfig(num_workers=2, resources_per_worker={"CPU": 2}), {"CPU": 4}),
        (ScalingConfig(num_workers=2, use_gpu=True), {"GPU": 2}),
    ],
)
def test_what_a_fit_needs_free(config, need):
    assert progress.needed(config) == need


def test_short_of_names_only_what_is_missing():
    assert progress.short_of({"CPU": 2}, {"CPU": 2.0, "GPU": 0}) == {}
    assert progress.short_of({"CPU": 2, "GPU": 1}, {"CPU": 1.0}) == {"CPU": 2, "GPU": 1}


def test_the_waiting_line_says_needed_free_and_when():
    line = progress.waiting_line({"CPU": 2}, {"CPU": 1.0}, {"CPU": 4.0}, 12.4)
    assert line == (
        "waiting for 2 CPU slots: 1 of 4 free, in use by other runs on this cluster; "
        "this run starts when they finish (12 s)"
    )


def test_free_at_once_is_silent(capsys):
    waited = progress.wait_for_slots(
        ScalingConfig(num_workers=2), free=lambda: {"CPU": 4.0}, total=lambda: {"CPU": 4}
    )
    assert waited < 0.1
    assert capsys.readouterr().err == ""


def _wait(workers: int, cpus_free: list[float], quiet_s: float) -> float:
    """wait_for_slots on a 4-CPU cluster whose free CPUs read ``cpus_free`` one poll after another."""
    readings = iter({"CPU": cpus} for cpus in cpus_free)
    return progress.wait_for_slots(
        ScalingConfig(num_workers=workers),
        poll_s=0.01,
        quiet_s=quiet_s,
        free=lambda: next(readings),
        total=lambda: {"CPU": 4.0},
    )


def test_a_busy_cluster_gets_one_updated_line_until_the_slots_free(capsys):
    waited = _wait(2, [0.0, 1.0, 1.0, 3.0], quiet_s=0)
    err = capsys.readouterr().err
    assert waited > 0
    assert "waiting for 2 CPU slots: 0 of 4 free" in err and "1 of 4 free" in err
    assert "this run starts when they finish" in err and "of waiting: this run starts" in err
    assert "Traceback" not in err


def test_slots_a_finished_run_gives_back_a_moment_later_are_waited_for_quietly(capsys):
    waited = _wait(4, [2.0, 2.0, 4.0], quiet_s=5)
    assert 0 < waited < 5 and capsys.readouterr().err == ""


def test_pending_placement_groups_of_this_job_are_what_the_run_waits_for(monkeypatch):
    import ray.util.state

    seen = {}

    class Group:
        bundles = [{"unit_resources": {"CPU": 1.0}}, {"unit_resources": {"CPU": 1.0}}]

    def fake_list(**kwargs):
        seen.update(kwargs)
        return [Group()]

    monkeypatch.setattr(dashboard, "state_address", lambda: "127.0.0.1:6379")
    monkeypatch.setattr(ray.util.state, "list_placement_groups", fake_list)
    monkeypatch.setattr(
        ray, "get_runtime_context", lambda: type("C", (), {"get_job_id": lambda self: "05000000"})()
    )
    assert progress.pending_need() == {"CPU": 2.0}
    assert ("state", "=", "PENDING") in seen["filters"] and ("creator_job_id", "=", "05000000") in seen[
        "filters"
    ]

    def no_dashboard():
        raise dashboard.StateApiUnavailable("no dashboard")

    monkeypatch.setattr(dashboard, "state_address", no_dashboard)
    assert progress.pending_need() is None  # no line, no error


def test_fit_progress_shows_the_waiting_line_while_fit_waits_for_its_placement_group(tmp_path, monkeypatch):
    import time

    import ray
    from ray.train import RunConfig

    from course_utils.core import progress
    from course_utils.core.history import ReportLog

    class Trainer:
        run_config = RunConfig(name="run", storage_path=str(tmp_path), callbacks=[ReportLog()])
        scaling_config = ScalingConfig(num_workers=2)

    monkeypatch.setattr(progress, "WAIT_CHECK_S", 0.05)
    monkeypatch.setattr(progress, "pending_need", lambda: {"CPU": 2.0})
    monkeypatch.setattr(ray, "available_resources", lambda: {"CPU": 0.0})
    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 4.0})
    with progress.fit_progress(Trainer(), total=1, every_s=0.02) as bar:
        time.sleep(0.3)
        assert bar.desc.startswith("waiting for 2 CPU slots: 0 of 4 free")
    assert bar.slots_waited_s > 0
