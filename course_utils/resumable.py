"""Lesson 04's mid-epoch resumption, and what its lesson-written loop reports.

Lesson 04 writes ``train_loop_resumable`` in its own #@save cell (``course_utils.lesson_code``):
lesson 02's loop that continues from ``ray.train.get_checkpoint()`` and crashes on purpose
(``faults.inject``) to prove it. This module holds the mid-epoch loop, built from lesson 02's
pieces (``training.setup_worker``, ``train_step``, ``Worker.epoch_metrics``,
``checkpoints.rank0_checkpoint``). ``train_loop_mid_epoch`` checkpoints every ``checkpoint_every`` steps together
with the iterator position of a ``torchdata`` ``StatefulDataLoader`` (``save_mid_epoch``), so a
restarted worker group continues at the exact next batch (``restore_mid_epoch``); lesson 04 shows
those two functions. Ray Data's iterator-state resumption is not in open-source Ray; the DataLoader
path is; ``course_utils.bench.recovery`` times it. Its checkpoints also carry what a learner (and
the tests) need to *see* the resumption: ``attempts`` (where every attempt started, its pid, when
it took its first step) and ``seen`` (the sample indices every rank trained on, committed at each
checkpoint).
"""

from __future__ import annotations

import os
import time
from typing import Any

import torch
from torch.utils.data import Dataset

from course_utils import checkpoints, faults, training
from course_utils.model import unwrap

# What train_loop_resumable reports each epoch: lesson 02's metrics and where the attempt began.
REPORTED_METRICS = (*training.REPORTED_METRICS, "start_epoch")
# What train_loop_mid_epoch reports (mid-epoch rows carry no test metrics).
REPORTED_METRICS_MID_EPOCH = (
    *training.REPORTED_METRICS,
    "step",
    "attempt",
    "upload",
    "partial_epoch",
)


class IndexRecorder(Dataset):
    """Wraps a map-style dataset and remembers which indices were read, in order.

    With ``num_workers=0`` the reads happen in the training process, so the list is exactly
    what this rank trained on since the last ``take()``.
    """

    def __init__(self, dataset: Dataset):
        self.dataset = dataset
        self.seen: list[int] = []

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int):
        self.seen.append(int(index))
        return self.dataset[index]

    def take(self) -> list[int]:
        """The indices read since the last call, and forget them."""
        out, self.seen = self.seen, []
        return out


def _gather(values: list[int]) -> list[list[int]]:
    """Every rank's list, in rank order (all ranks must call this together)."""
    dist = torch.distributed
    if not dist.is_available() or not dist.is_initialized():
        return [values]
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, values)
    return out


def make_stateful_loader(dataset: Dataset, batch: int, rank: int, world: int, seed: int):
    """A ``StatefulDataLoader`` over this rank's ``DistributedSampler`` shard.

    Not passed through ``ray.train.torch.prepare_data_loader``: that rebuilds plain
    DataLoaders and, with ``move_to_device``, prefetches a batch ahead, so the saved position
    would be off by one. Batches are moved to the device by ``train_step``.
    """
    from torch.utils.data import DistributedSampler
    from torchdata.stateful_dataloader import StatefulDataLoader

    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True, seed=seed)
    return StatefulDataLoader(dataset, batch_size=batch, sampler=sampler, num_workers=0)


def restore_mid_epoch(worker: training.Worker, loader) -> tuple[int, int, dict[str, Any] | None]:
    """Where this attempt starts: ``(epoch, step, state)`` from ``ray.train.get_checkpoint()``.

    ``(0, 0, None)`` on a fresh start. Otherwise the saved weights, optimizer and RNG are loaded, and
    when the checkpoint was taken mid-epoch the loader's iterator is put back, so its next batch is the
    first one the lost attempt had not trained on.
    """
    import ray.train

    checkpoint = ray.train.get_checkpoint()  # None on a fresh start; after a failure, the latest one
    if checkpoint is None:
        return 0, 0, None
    state = checkpoints.load_state(checkpoint)
    unwrap(worker.model).load_state_dict(state["model"])
    worker.optimizer.load_state_dict(state["optimizer"])
    checkpoints.set_rng_state(state["rng"])
    epoch, step = state["next_epoch"], state["next_step"]
    # each rank's share of an epoch depends on the world size: mid-epoch, it must not have changed
    if step and state["world_size"] != worker.world:
        raise RuntimeError(
            f"The mid-epoch checkpoint was saved by {state['world_size']} workers, this attempt has "
            f"{worker.world}: each rank's shard of the epoch differs, so it cannot continue mid-epoch. Use a "
            "fixed num_workers with mid-epoch checkpoints, or resume from an epoch-boundary checkpoint."
        )
    if step:
        loader.load_state_dict(state["loader"])  # the iterator skips the `step` batches already done
    return epoch, step, state


def save_mid_epoch(
    worker: training.Worker,
    loader,
    epoch: int,
    step: int,
    epoch_done: bool,
    metrics: dict[str, Any],
    history: list[dict],
    *,
    upload: str = "sync",
    before_commit=None,
    **extra: Any,
) -> None:
    """Checkpoint after ``step`` batches of ``epoch``, with the loader's place in the epoch, and report it.

    Every rank calls it (``report`` is a barrier); rank 0 writes the checkpoint. ``extra``: what the
    loop also keeps in it. ``upload="async"``: ``report_async`` (Ray uploads on its own thread).
    """
    import ray.train

    state = worker.state(
        epoch,
        history,
        next_epoch=epoch + 1 if epoch_done else epoch,  # where a restarted attempt continues
        next_step=0 if epoch_done else step,
        loader=None if epoch_done else loader.state_dict(),  # the iterator's place in this epoch
        world_size=worker.world,
        **extra,
    )
    if upload == "async":
        report_async(worker.rank, metrics, state, before_commit=before_commit)
        return
    # synchronous: written on rank 0, loaded back and uploaded before report returns
    rank = worker.rank
    written = checkpoints.write_checkpoint_dir(state, before_commit=before_commit) if rank == 0 else None
    with checkpoints.rank0_checkpoint(rank, written) as checkpoint:
        ray.train.report(metrics, checkpoint=checkpoint)


def report_async(rank: int, metrics: dict[str, Any], state: dict[str, Any], *, before_commit=None) -> None:
    """``ray.train.report`` with an asynchronous upload: training goes on while Ray's thread uploads.

    The training thread only copies ``state`` in memory (``checkpoints.rank0_snapshot``); Ray's upload
    thread writes the copy, loads it back and uploads it. A failed upload is raised in the training
    thread afterwards.
    """
    import ray.train
    from ray.train import CheckpointUploadMode

    checkpoint, write_then_upload = checkpoints.rank0_snapshot(rank, state, before_commit=before_commit)
    ray.train.report(
        metrics,
        checkpoint=checkpoint,
        checkpoint_upload_mode=CheckpointUploadMode.ASYNC,
        checkpoint_upload_fn=write_then_upload,
    )


def train_loop_mid_epoch(config: dict[str, Any]) -> None:
    """Ray Train worker loop that checkpoints every ``config["checkpoint_every"]`` steps.

    Checkpoints upload asynchronously (``config["checkpoint_uploads"]``, default ``["async"]``;
    ``["sync", "async"]`` alternates the two, so one run measures both side by side).

    Resumes at the saved (epoch, step) (``restore_mid_epoch``): model, optimizer, RNG and the
    DataLoader's iterator state are restored, so no batch is repeated or skipped; saves with
    ``save_mid_epoch``. Its own per-step loop (``train_step``): it checkpoints between steps. The rest
    is bookkeeping that lets a learner (and the tests) see the resumption: ``attempts`` and ``seen``.
    """
    worker = training.setup_worker(config)
    rank, world = worker.rank, worker.world
    every = int(config.get("checkpoint_every", 5))
    uploads = list(config.get("checkpoint_uploads", ["async"]))
    fault = config.get("fault")
    recorder = IndexRecorder(worker.train_ds)
    loader = make_stateful_loader(recorder, worker.batch, rank, world, config["seed"])

    epoch, step, state = restore_mid_epoch(worker, loader)
    history: list[dict] = state["history"] if state else []
    seen: list[list[list[int]]] = state["seen"] if state else []
    attempts: list[dict] = state["attempts"] if state else []
    attempts.append(
        {
            "attempt": len(attempts) + 1,
            "pid": os.getpid(),
            "world_size": world,
            "start_epoch": epoch,
            "start_step": step,
            "started_at": time.time(),
            "first_step_at": None,
        }
    )
    if rank == 0:
        where = f"epoch {epoch}, step {step} (from the checkpoint)" if state else "epoch 0, step 0"
        print(f"[rank 0] attempt {len(attempts)}: {world} worker(s), starting at {where}", flush=True)

    def save(done_epoch: int, done_steps: int, epoch_end: bool, row: dict[str, Any]) -> None:
        for r, indices in enumerate(_gather(recorder.take())):  # what every rank trained on
            while len(seen) <= done_epoch:
                seen.append([[] for _ in range(world)])
            seen[done_epoch][r].extend(indices)
        upload = uploads[len(history) % len(uploads)]  # "sync" / "async"; several alternate, to compare them
        row = {
            "epoch": done_epoch,
            "step": done_steps,
            "world_size": world,
            "attempt": len(attempts),
            "upload": upload,
            **row,
        }
        history.append(row)

        def crash_while_writing() -> None:  # between writing state.pt.partial and renaming it
            faults.maybe_fail(fault, rank=rank, epoch=done_epoch, step=done_steps, during="checkpoint")

        start = time.perf_counter()
        save_mid_epoch(
            worker,
            loader,
            done_epoch,
            done_steps,
            epoch_end,
            dict(row),  # a copy: the row gets its checkpoint_s below
            history,
            upload=upload,
            before_commit=crash_while_writing,
            seen=seen,
            attempts=attempts,
        )
        # what training waited; travels in the next checkpoint
        row["checkpoint_s"] = time.perf_counter() - start

    while epoch < config["epochs"]:
        loader.sampler.set_epoch(epoch)  # same shuffle as an uninterrupted run of this epoch
        steps_in_epoch, offset, started = len(loader), step, time.perf_counter()
        worker.model.train()
        total, images = 0.0, 0
        batches = faults.inject(loader, fault, rank=rank, epoch=epoch, first_step=offset)
        for step, (inputs, labels) in enumerate(batches, offset):
            if attempts[-1]["first_step_at"] is None:
                attempts[-1]["first_step_at"] = time.time()
            loss = training.train_step(worker.model, inputs, labels, worker.optimizer, worker.device)
            total, images = total + loss * len(labels), images + len(labels)
            if (step + 1) % every == 0 and step + 1 < steps_in_epoch:
                save(epoch, step + 1, False, {})
        metrics = worker.epoch_metrics(epoch, total / max(images, 1), images, time.perf_counter() - started)
        if rank == 0:
            print(
                f"[rank 0] epoch {epoch} done (steps {offset}..{steps_in_epoch - 1} in this attempt): "
                f"accuracy={metrics['accuracy']:.3f}",
                flush=True,
            )
        save(epoch, steps_in_epoch, True, {**metrics, "partial_epoch": offset > 0})
        epoch, step = epoch + 1, 0


def expected_indices(train_size: int, world: int, epochs: int, seed: int = 0) -> list[list[list[int]]]:
    """[epoch][rank] -> the sample indices an uninterrupted run trains on, from the sampler alone."""
    from torch.utils.data import DistributedSampler

    out = []
    for epoch in range(epochs):
        ranks = []
        for rank in range(world):
            sampler = DistributedSampler(
                range(train_size), num_replicas=world, rank=rank, shuffle=True, seed=seed
            )
            sampler.set_epoch(epoch)
            ranks.append(list(sampler))
        out.append(ranks)
    return out


def make_trainer_mid_epoch(
    name: str,
    profile=None,
    *,
    num_workers: int | None = None,
    max_failures: int = 1,
    num_to_keep: int = 2,
    **config_overrides: Any,
):
    """``training.make_trainer`` for ``train_loop_mid_epoch``: checkpoints kept by recency, not score
    (mid-epoch reports carry no accuracy)."""
    from course_utils.training import make_trainer

    return make_trainer(
        name,
        profile,
        num_workers=num_workers,
        num_to_keep=num_to_keep,
        max_failures=max_failures,
        train_loop=train_loop_mid_epoch,
        score_attribute=None,
        **config_overrides,
    )


def attempts_frame(state: dict[str, Any]):
    """The attempts recorded in a mid-epoch checkpoint's state, as a DataFrame."""
    import pandas as pd

    return pd.DataFrame(state["attempts"])
