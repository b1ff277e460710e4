"""Lesson 04's mid-epoch loop (``train_loop_mid_epoch``, written in section 12's #@save cell) and what reads its
runs back (``resumable``), run without a Ray cluster: Ray Train's calls are stand-ins that keep what a real run
would upload and hand back; the training, the checkpoints and the faults are real.
``tests/integration/test_fault_tolerance.py`` runs the loop under Ray with two workers."""

from __future__ import annotations

import shutil
import types
from pathlib import Path

import pytest
import torch

from course_utils import lesson_code
from course_utils.core import checkpoints, config, training
from course_utils.lesson04 import faults, resumable

TINY = config.SMOKE.with_(epochs=2, train_size=32, test_size=16, batch_size=4)  # 8 steps an epoch


class FakeRay:
    """``ray.train``'s calls for one worker of ``world``: ``report`` keeps a copy of every checkpoint (as
    storage would) and deletes the worker's folder when asked to, ``get_checkpoint`` hands back the latest
    kept one. ``restart_fresh()`` forgets every checkpoint: the next run starts as a new one."""

    def __init__(self, tmp_path: Path, world: int = 1):
        self.tmp_path, self.world = tmp_path, world
        self.reports: list[dict] = []
        self.kept: list[Path] = []
        self.runs = 0

    def get_context(self):
        return types.SimpleNamespace(get_world_rank=lambda: 0, get_world_size=lambda: self.world)

    def report(
        self,
        metrics,
        checkpoint=None,
        checkpoint_upload_mode=None,
        delete_local_checkpoint_after_upload=False,
    ):
        if checkpoint is not None:
            kept = self.tmp_path / f"run{self.runs}" / f"checkpoint_{len(self.kept)}"
            shutil.copytree(checkpoint.path, kept)
            self.kept.append(kept)
            if delete_local_checkpoint_after_upload:
                shutil.rmtree(checkpoint.path)
        self.reports.append({"metrics": metrics, "mode": checkpoint_upload_mode, "checkpoint": checkpoint})

    def get_checkpoint(self):
        import ray.train

        return ray.train.Checkpoint.from_directory(str(self.kept[-1])) if self.kept else None

    def restart_fresh(self) -> None:
        self.reports, self.kept, self.runs = [], [], self.runs + 1


class Wrapped(torch.nn.Module):
    """A stand-in for DDP's wrapper: the model is its ``module``."""

    def __init__(self, module: torch.nn.Module):
        super().__init__()
        self.module = module

    def forward(self, x):
        return self.module(x)


@pytest.fixture
def fake_ray(monkeypatch, tmp_path):
    import ray.train
    import ray.train.torch

    fake = FakeRay(tmp_path)
    monkeypatch.setattr(ray.train, "get_context", fake.get_context)
    monkeypatch.setattr(ray.train, "report", fake.report)
    monkeypatch.setattr(ray.train, "get_checkpoint", fake.get_checkpoint)
    monkeypatch.setattr(ray.train.torch, "get_device", lambda: torch.device("cpu"))
    # as Ray Train's: the model itself for one worker, inside a wrapper (DDP's) for more
    monkeypatch.setattr(
        ray.train.torch, "prepare_model", lambda model: model if fake.world == 1 else Wrapped(model)
    )
    return fake


def _run(mnist_root, **overrides) -> None:
    lesson_code.train_loop_mid_epoch(training.loop_config(TINY, data_root=mnist_root, **overrides))


def _weights(kept: Path) -> dict[str, torch.Tensor]:
    return checkpoints.load_state(kept)["model"]


def _uninterrupted(fake_ray, mnist_root, **overrides) -> dict[str, torch.Tensor]:
    """The final weights of the same run with no fault; the fake storage is emptied afterwards."""
    _run(mnist_root, **overrides)
    weights = _weights(fake_ray.kept[-1])
    fake_ray.restart_fresh()
    return weights


def _same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_killed_mid_epoch_the_next_attempt_ends_with_the_uninterrupted_weights(
    fake_ray, mnist_root, tmp_path, capsys
):
    options = {"checkpoint_every": 3, "checkpoint_uploads": ["sync"]}
    uninterrupted = _uninterrupted(fake_ray, mnist_root, **options)
    crash = faults.crash_once(tmp_path / "marker", rank=0, epoch=0, step=7)  # before the 8th batch
    with pytest.raises(faults.InjectedFault):
        _run(mnist_root, fault=crash, **options)
    assert [r["metrics"]["step"] for r in fake_ray.reports] == [3, 6], "saved every 3 steps, then died"
    _run(mnist_root, fault=crash, **options)  # the restart

    state = checkpoints.load_state(fake_ray.kept[-1])
    tried = resumable.attempts(state["history"])
    assert tried[["attempt", "start_epoch", "start_step"]].values.tolist() == [[1, 0, 0], [2, 0, 6]], (
        "attempt 2 began at the last save's step"
    )
    assert tried.first_step_at.iloc[0] < tried.first_step_at.iloc[1]
    assert _same(state["model"], uninterrupted), (
        "steps 6 and 7 of epoch 0 trained after the restart, on the same digits in the same order"
    )
    rows = resumable.with_attempts([r["metrics"] for r in fake_ray.reports])
    assert rows[["epoch", "step", "attempt"]].values.tolist() == [
        [0, 3, 1],
        [0, 6, 1],
        [0, 8, 2],
        [1, 3, 2],
        [1, 6, 2],
        [1, 8, 2],
    ]
    assert rows.dropna(subset=["accuracy"]).partial_epoch.tolist() == [True, False]
    assert [(r["epoch"], r["step"]) for r in state["history"]] == [(e, s) for e in (0, 1) for s in (3, 6, 8)]
    # each save's wait travels in the next checkpoint: not the last one's, nor the one before the crash
    assert ["checkpoint_s" in r for r in state["history"]] == [True, False, True, True, True, False]
    assert (state["next_epoch"], state["next_step"], state["loader"]) == (2, 0, None)
    printed = capsys.readouterr().out
    assert "[rank 0] 1 worker(s) on cpu, starting at epoch 0, step 6 (from the checkpoint)" in printed
    assert "[rank 0] epoch 0 done (steps 6..7 in this attempt)" in printed


def test_saves_alternate_sync_and_async_and_both_load(fake_ray, mnist_root):
    from ray.train import CheckpointUploadMode

    _run(mnist_root, epochs=1, checkpoint_every=2, checkpoint_uploads=["sync", "async"])
    rows = [r["metrics"] for r in fake_ray.reports]
    assert [r["upload"] for r in rows] == ["sync", "async", "sync", "async"]
    assert [r["mode"] for r in fake_ray.reports] == [
        CheckpointUploadMode.SYNC,
        CheckpointUploadMode.ASYNC,
    ] * 2
    loaded = [checkpoints.load_state(kept) for kept in fake_ray.kept]
    assert [(s["next_epoch"], s["next_step"]) for s in loaded] == [(0, 2), (0, 4), (0, 6), (1, 0)]
    handed = [Path(r["checkpoint"].path) for r in fake_ray.reports]
    assert not any(path.exists() for path in handed), "Ray deletes each folder it was handed once uploaded"


def test_a_crash_while_writing_reports_nothing_and_the_restart_resumes_from_the_save_before(
    fake_ray, mnist_root, tmp_path
):
    options = {"epochs": 1, "checkpoint_every": 3, "checkpoint_uploads": ["sync"]}
    uninterrupted = _uninterrupted(fake_ray, mnist_root, **options)
    crash = faults.crash_once(tmp_path / "marker", rank=0, epoch=0, step=6, during="checkpoint")
    with pytest.raises(faults.InjectedFault):
        _run(mnist_root, fault=crash, **options)
    assert [r["metrics"]["step"] for r in fake_ray.reports] == [3], "the save it died in was never reported"
    _run(mnist_root, fault=crash, **options)
    state = checkpoints.load_state(fake_ray.kept[-1])
    assert resumable.attempts(state["history"]).start_step.tolist() == [0, 3]
    assert _same(state["model"], uninterrupted)


def test_a_mid_epoch_checkpoint_refuses_another_world_size(fake_ray, mnist_root, tmp_path):
    crash = faults.crash_once(tmp_path / "marker", rank=0, epoch=0, step=4)
    with pytest.raises(faults.InjectedFault):
        _run(mnist_root, checkpoint_every=3, fault=crash)
    fake_ray.world = 2  # the restarted group is larger: each rank's shard differs
    with pytest.raises(RuntimeError) as caught:
        _run(mnist_root, checkpoint_every=3, fault=crash)
    assert "saved mid-epoch by 1 workers, resumed by 2" in str(caught.value)


def test_attempts_are_read_back_from_the_rows_reported():
    rows = [
        {"epoch": 0, "step": 3, "world_size": 2, "start_epoch": 0, "start_step": 0, "first_step_at": 10.0},
        {"epoch": 0, "step": 6, "world_size": 2, "start_epoch": 0, "start_step": 0, "first_step_at": 10.0},
        {"epoch": 0, "step": 9, "world_size": 2, "start_epoch": 0, "start_step": 6, "first_step_at": 30.0},
        {"epoch": 1, "step": 3, "world_size": 2, "start_epoch": 0, "start_step": 6, "first_step_at": 30.0},
    ]
    assert resumable.with_attempts(rows).attempt.tolist() == [1, 1, 2, 2]
    tried = resumable.attempts(rows)
    assert tried.values.tolist() == [[1, 2, 0, 0, 10.0], [2, 2, 0, 6, 30.0]]
    with pytest.raises(ValueError, match="start_step"):
        resumable.attempts([{"epoch": 0, "world_size": 1}])  # another loop's rows
