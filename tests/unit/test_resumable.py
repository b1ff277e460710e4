"""Lesson 04's mid-epoch save and restore (``resumable.save_mid_epoch`` / ``restore_mid_epoch``), the two
functions section 07 shows, run without a Ray cluster: ``ray.train.report`` and ``get_checkpoint`` are
stand-ins that keep what a real run would upload and hand back."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset

from course_utils import checkpoints, resumable, training

BATCH = 4
DIGITS = 40  # 10 batches an epoch on one rank


def _worker(rank: int = 0, world: int = 1, seed: int = 0) -> training.Worker:
    torch.manual_seed(seed)
    model = nn.Linear(3, 2)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    dataset = TensorDataset(torch.arange(DIGITS * 3, dtype=torch.float32).reshape(DIGITS, 3))
    return training.Worker(rank, world, torch.device("cpu"), BATCH, model, optimizer, dataset, None)


def _loader(worker: training.Worker, epoch: int = 0):
    loader = resumable.make_stateful_loader(worker.train_ds, BATCH, worker.rank, worker.world, seed=0)
    loader.sampler.set_epoch(epoch)
    return loader


def _step(worker: training.Worker, batch) -> None:
    worker.optimizer.zero_grad()
    worker.model(batch[0]).sum().backward()
    worker.optimizer.step()


@pytest.fixture
def ray_run(monkeypatch, tmp_path):
    """Stand-ins for ``ray.train.report`` (keeps a copy of each uploaded checkpoint, as storage would) and
    ``ray.train.get_checkpoint`` (hands back the latest kept one, or None)."""
    import ray.train

    run = {"reports": [], "kept": [], "resume": False}

    def report(metrics, checkpoint=None, **kwargs):
        kept = None
        if checkpoint is not None:
            kept = tmp_path / f"checkpoint_{len(run['kept'])}"
            shutil.copytree(checkpoint.path, kept)
            run["kept"].append(kept)
        run["reports"].append({"metrics": metrics, "checkpoint": checkpoint, "kept": kept, **kwargs})

    def get_checkpoint():
        if not run["resume"] or not run["kept"]:
            return None
        return ray.train.Checkpoint.from_directory(str(run["kept"][-1]))

    monkeypatch.setattr(ray.train, "report", report)
    monkeypatch.setattr(ray.train, "get_checkpoint", get_checkpoint)
    return run


def test_a_fresh_start_begins_at_epoch_0_step_0(ray_run):
    worker = _worker()
    assert resumable.restore_mid_epoch(worker, _loader(worker)) == (0, 0, None)


def test_saved_mid_epoch_the_restarted_loader_continues_at_the_next_batch(ray_run):
    worker = _worker()
    loader = _loader(worker)
    batches = iter(loader)
    for _ in range(3):  # three steps of epoch 0, then the save
        _step(worker, next(batches))
    history = [{"epoch": 0, "step": 3}]
    resumable.save_mid_epoch(worker, loader, 0, 3, False, {"step": 3}, history, attempts=[{"attempt": 1}])
    [reported] = ray_run["reports"]
    assert reported["metrics"] == {"step": 3} and reported["kept"] is not None
    assert not Path(reported["checkpoint"].path).exists(), (
        "rank 0's temp folder goes once report has copied it"
    )
    state = checkpoints.load_state(reported["kept"])
    assert (state["next_epoch"], state["next_step"], state["world_size"]) == (0, 3, 1)
    assert (
        state["loader"] is not None and state["attempts"] == [{"attempt": 1}] and state["history"] == history
    )

    ray_run["resume"] = True  # a new attempt: new processes, fresh weights, a fresh loader
    restarted = _worker(seed=1)
    restarted_loader = _loader(restarted)
    epoch, step, restored = resumable.restore_mid_epoch(restarted, restarted_loader)
    assert (epoch, step) == (0, 3) and restored["history"] == history
    for saved, loaded in zip(
        worker.model.state_dict().values(), restarted.model.state_dict().values(), strict=True
    ):
        assert torch.equal(saved, loaded), "the weights come back"
    assert restarted.optimizer.state_dict()["state"], "and Adam's moments"
    uninterrupted = [b[0] for b in _loader(_worker())]
    assert torch.equal(next(iter(restarted_loader))[0], uninterrupted[3]), "the 4th batch, not the 1st"


def test_saved_at_the_end_of_an_epoch_the_next_attempt_starts_the_next_epoch(ray_run):
    worker = _worker()
    loader = _loader(worker)
    for batch in loader:
        _step(worker, batch)
    resumable.save_mid_epoch(worker, loader, 0, len(loader), True, {"accuracy": 0.5}, [{"epoch": 0}])
    state = checkpoints.load_state(ray_run["reports"][0]["kept"])
    assert (state["next_epoch"], state["next_step"], state["loader"]) == (1, 0, None)
    ray_run["resume"] = True
    restarted = _worker(seed=1)
    assert resumable.restore_mid_epoch(restarted, _loader(restarted, epoch=1))[:2] == (1, 0)


def test_a_mid_epoch_checkpoint_refuses_another_world_size(ray_run):
    two = _worker(world=2)
    loader = _loader(two)
    next(iter(loader))
    resumable.save_mid_epoch(two, loader, 0, 1, False, {}, [])
    ray_run["resume"] = True
    one = _worker()
    with pytest.raises(RuntimeError) as caught:
        resumable.restore_mid_epoch(one, _loader(one))
    assert "saved by 2 workers, this attempt has 1" in str(caught.value)


def test_every_rank_reports_only_rank_0_writes_and_the_fault_hook_runs_there(ray_run):
    calls = []
    for rank in (1, 0):
        worker = _worker(rank=rank, world=2)
        loader = _loader(worker)
        next(iter(loader))
        resumable.save_mid_epoch(
            worker, loader, 0, 1, False, {"rank": rank}, [], before_commit=lambda r=rank: calls.append(r)
        )
    assert [r["metrics"]["rank"] for r in ray_run["reports"]] == [1, 0], (
        "report is a barrier: every rank calls it"
    )
    assert [r["checkpoint"] is None for r in ray_run["reports"]] == [True, False]
    assert calls == [0], "the crash-while-writing hook runs where the checkpoint is written"


def test_an_asynchronous_save_hands_ray_a_snapshot_and_the_upload(ray_run, monkeypatch):
    import types

    import ray.train
    from ray.train import CheckpointUploadMode

    worker = _worker()
    loader = _loader(worker)
    next(iter(loader))
    resumable.save_mid_epoch(worker, loader, 0, 1, False, {"step": 1}, [], upload="async")
    [reported] = ray_run["reports"]
    assert reported["checkpoint_upload_mode"] == CheckpointUploadMode.ASYNC
    folder = Path(reported["checkpoint"].path)
    assert not (folder / checkpoints.STATE_FILE).exists(), "the training thread only copied the state"
    storage = types.SimpleNamespace(persist_current_checkpoint=lambda checkpoint, name: checkpoint)
    monkeypatch.setattr(ray.train, "get_context", lambda: types.SimpleNamespace(get_storage=lambda: storage))
    reported["checkpoint_upload_fn"](reported["checkpoint"], "checkpoint_0")  # what Ray's upload thread runs
    assert checkpoints.load_state(folder)["next_step"] == 1
    shutil.rmtree(folder)
