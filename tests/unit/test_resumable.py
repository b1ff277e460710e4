"""Lesson 04's mid-epoch loop (``train_loop_mid_epoch``, written in section 12's #@save cell) and its
bookkeeping (``resumable.RunRecord``), run without a Ray cluster: Ray Train's calls are stand-ins that
keep what a real run would upload and hand back; the training, the checkpoints and the faults are
real. ``tests/integration/test_fault_tolerance.py`` runs the loop under Ray with two workers."""

from __future__ import annotations

import shutil
import types
from pathlib import Path

import pytest
import torch
from torch.utils.data import TensorDataset

from course_utils import checkpoints, config, faults, lesson_code, resumable, training

TINY = config.SMOKE.with_(epochs=2, train_size=32, test_size=16, batch_size=4)  # 8 steps an epoch


class FakeRay:
    """``ray.train``'s calls for one worker of ``world``: ``report`` keeps a copy of every
    checkpoint (as storage would, running an asynchronous upload on the spot) and
    ``get_checkpoint`` hands back the latest kept one."""

    def __init__(self, tmp_path: Path, world: int = 1):
        self.tmp_path, self.world = tmp_path, world
        self.reports: list[dict] = []
        self.kept: list[Path] = []

    def get_context(self):
        storage = types.SimpleNamespace(persist_current_checkpoint=lambda checkpoint, name: checkpoint)
        return types.SimpleNamespace(
            get_world_rank=lambda: 0, get_world_size=lambda: self.world, get_storage=lambda: storage
        )

    def report(self, metrics, checkpoint=None, checkpoint_upload_mode=None, checkpoint_upload_fn=None):
        if checkpoint_upload_fn is not None:  # what Ray's upload thread runs
            assert not (Path(checkpoint.path) / checkpoints.STATE_FILE).exists(), (
                "an asynchronous save hands Ray the folder before writing it"
            )
            checkpoint = checkpoint_upload_fn(checkpoint, f"checkpoint_{len(self.kept)}")
        if checkpoint is not None:
            kept = self.tmp_path / f"checkpoint_{len(self.kept)}"
            shutil.copytree(checkpoint.path, kept)
            self.kept.append(kept)
            if checkpoint_upload_mode is not None:
                # Ray deletes an asynchronous upload's local folder once it is in storage
                # (CheckpointUploadMode.default_delete_local_checkpoint_after_upload)
                assert checkpoint_upload_mode.default_delete_local_checkpoint_after_upload()
                shutil.rmtree(checkpoint.path)
        self.reports.append({"metrics": metrics, "mode": checkpoint_upload_mode})

    def get_checkpoint(self):
        import ray.train

        return ray.train.Checkpoint.from_directory(str(self.kept[-1])) if self.kept else None


@pytest.fixture
def fake_ray(monkeypatch, tmp_path):
    import ray.train
    import ray.train.torch

    fake = FakeRay(tmp_path)
    monkeypatch.setattr(ray.train, "get_context", fake.get_context)
    monkeypatch.setattr(ray.train, "report", fake.report)
    monkeypatch.setattr(ray.train, "get_checkpoint", fake.get_checkpoint)
    monkeypatch.setattr(ray.train.torch, "get_device", lambda: torch.device("cpu"))
    monkeypatch.setattr(ray.train.torch, "prepare_model", lambda model: model)
    return fake


def _run(mnist_root, **overrides) -> None:
    lesson_code.train_loop_mid_epoch(training.loop_config(TINY, data_root=mnist_root, **overrides))


def test_killed_mid_epoch_the_next_attempt_trains_every_sample_once(fake_ray, mnist_root, tmp_path, capsys):
    crash = faults.crash_once(tmp_path / "marker", rank=0, epoch=0, step=7)  # before the 8th batch
    with pytest.raises(faults.InjectedFault):
        _run(mnist_root, checkpoint_every=3, checkpoint_uploads=["sync"], fault=crash)
    assert [r["metrics"]["step"] for r in fake_ray.reports] == [3, 6], "saved every 3 steps, then died"
    _run(mnist_root, checkpoint_every=3, checkpoint_uploads=["sync"], fault=crash)  # the restart

    state = checkpoints.load_state(fake_ray.kept[-1])
    assert [(a["attempt"], a["start_epoch"], a["start_step"]) for a in state["attempts"]] == [
        (1, 0, 0),
        (2, 0, 6),
    ], "attempt 2 began at the last save's step"
    assert all(a["first_step_at"] for a in state["attempts"])
    assert state["seen"] == resumable.expected_indices(TINY.train_size, world=1, epochs=2, seed=TINY.seed), (
        "every sample once, in the uninterrupted order: steps 6 and 7 of epoch 0 trained after the restart"
    )
    rows = [r["metrics"] for r in fake_ray.reports]
    assert [(r["epoch"], r["step"], r["attempt"]) for r in rows] == [
        (0, 3, 1),
        (0, 6, 1),
        (0, 8, 2),
        (1, 3, 2),
        (1, 6, 2),
        (1, 8, 2),
    ]
    assert [r.get("partial_epoch") for r in rows if "accuracy" in r] == [True, False]
    assert [(r["epoch"], r["step"]) for r in state["history"]] == [(e, s) for e in (0, 1) for s in (3, 6, 8)]
    # each save's wait travels in the next checkpoint: not the last one's, nor the one before the crash
    assert ["checkpoint_s" in r for r in state["history"]] == [True, False, True, True, True, False]
    assert (state["next_epoch"], state["next_step"], state["loader"]) == (2, 0, None)
    printed = capsys.readouterr().out
    assert (
        "[rank 0] attempt 2: 1 worker(s) on cpu, starting at epoch 0, step 6 (from the checkpoint)" in printed
    )
    assert "[rank 0] epoch 0 done (steps 6..7 in this attempt)" in printed


def test_saves_alternate_sync_and_async_and_both_load(fake_ray, mnist_root):
    from ray.train import CheckpointUploadMode

    _run(mnist_root, epochs=1, checkpoint_every=2, checkpoint_uploads=["sync", "async"])
    rows = [r["metrics"] for r in fake_ray.reports]
    assert [r["upload"] for r in rows] == ["sync", "async", "sync", "async"]
    assert [r["mode"] for r in fake_ray.reports] == [None, CheckpointUploadMode.ASYNC] * 2
    loaded = [checkpoints.load_state(kept) for kept in fake_ray.kept]
    assert [(s["next_epoch"], s["next_step"]) for s in loaded] == [(0, 2), (0, 4), (0, 6), (1, 0)]


def test_a_crash_while_writing_reports_nothing_and_the_restart_resumes_from_the_save_before(
    fake_ray, mnist_root, tmp_path
):
    crash = faults.crash_once(tmp_path / "marker", rank=0, epoch=0, step=6, during="checkpoint")
    with pytest.raises(faults.InjectedFault):
        _run(mnist_root, epochs=1, checkpoint_every=3, checkpoint_uploads=["sync"], fault=crash)
    assert [r["metrics"]["step"] for r in fake_ray.reports] == [3], "the half-written save was never reported"
    _run(mnist_root, epochs=1, checkpoint_every=3, checkpoint_uploads=["sync"], fault=crash)
    state = checkpoints.load_state(fake_ray.kept[-1])
    assert [a["start_step"] for a in state["attempts"]] == [0, 3]
    assert state["seen"] == resumable.expected_indices(TINY.train_size, world=1, epochs=1, seed=TINY.seed)


def test_a_mid_epoch_checkpoint_refuses_another_world_size(fake_ray, mnist_root, tmp_path):
    crash = faults.crash_once(tmp_path / "marker", rank=0, epoch=0, step=4)
    with pytest.raises(faults.InjectedFault):
        _run(mnist_root, checkpoint_every=3, fault=crash)
    fake_ray.world = 2  # the restarted group is larger: each rank's shard differs
    with pytest.raises(RuntimeError) as caught:
        _run(mnist_root, checkpoint_every=3, fault=crash)
    assert "saved by 1 workers, this attempt has 2" in str(caught.value)


def test_run_record_keeps_each_ranks_indices_per_epoch_and_every_attempt():
    record = resumable.RunRecord()
    dataset = record.watch(TensorDataset(torch.arange(10)))
    assert len(dataset) == 10 and dataset[4][0] == 4, "the same dataset"
    assert record.start_attempt(None, world=1, epoch=0, step=0) == 1
    dataset[3], dataset[5]
    kept = record.kept(0)
    assert kept["seen"] == [[[4, 3, 5]]] and kept["attempts"][0]["first_step_at"] is None
    assert record.kept(0)["seen"] == [[[4, 3, 5]]], (
        "each index once: a save takes what was read since the last"
    )
    record.stepped()
    first = record.attempts[0]["first_step_at"]
    record.stepped()
    assert record.attempts[0]["first_step_at"] == first, "the first step only"
    again = resumable.RunRecord()
    assert again.start_attempt({"seen": kept["seen"], "attempts": kept["attempts"]}, 1, 0, 2) == 2
    assert [a["start_step"] for a in again.attempts] == [0, 2]
