"""The Ray Train loops lessons 02-04 teach, from the lessons' ``#@save`` cells.

GENERATED: do not edit. Edit the cell in the lesson named above each definition,
then run ``./build.sh export`` (``maintainer_tools.export``);
``tests/unit/test_export.py`` fails while the two differ. Lines stay within 88
characters, as in the lessons.
"""

from __future__ import annotations

import time

import ray.train
import ray.train.torch
import torch
from ray.train import CheckpointUploadMode
from torch.utils.data import DistributedSampler
from torchdata.stateful_dataloader import StatefulDataLoader

from course_utils import data, faults, resumable
from course_utils.checkpoints import (
    load_state,
    rank0_checkpoint,
    rank0_snapshot,
    set_rng_state,
    training_state,
)
from course_utils.model import build_resnet18, unwrap
from course_utils.plan import per_worker_batch
from course_utils.steps import epoch_metrics, train_one_epoch, train_step


# From 02_ray_train_migration.ipynb, cell 6:
# '# 02. The function every worker runs'.
def train_loop_per_worker(config: dict) -> None:
    """What each Ray Train worker runs: lesson 01's loop plus the Ray Train calls."""
    # who am I: this worker's rank, and how many workers there are
    context = ray.train.get_context()
    rank, world = context.get_world_rank(), context.get_world_size()
    device = ray.train.torch.get_device()  # this worker's GPU, or the CPU
    # the global batch, split across workers
    batch = per_worker_batch(config["batch_size"], world)
    torch.manual_seed(config["seed"])  # every rank builds the same initial weights
    train_ds, test_ds = data.course_datasets(
        config["train_size"], config["test_size"], config["data_root"], config["seed"]
    )

    # Ray Train: move to this worker's device; wrap in DDP when world > 1, so gradients
    # are averaged.
    model = ray.train.torch.prepare_model(build_resnet18())
    optimizer = torch.optim.Adam(model.parameters(), lr=config["lr"])
    # Ray Train: a DistributedSampler gives each worker its own shard; batches land on
    # the device.
    loader = ray.train.torch.prepare_data_loader(
        data.make_loader(train_ds, batch, shuffle=True)
    )
    # this rank's test digits
    test_loader = data.make_loader(
        data.rank_share(test_ds, rank, world), 512, shuffle=False
    )
    if rank == 0:
        print(
            f"[rank 0] {world} worker(s) on {device}, per-worker batch {batch}",
            flush=True,
        )

    history = []
    for epoch in range(config["epochs"]):
        if world > 1:
            # otherwise every epoch shuffles the same way
            loader.sampler.set_epoch(epoch)
        start = time.perf_counter()
        # lesson 01's, unchanged
        train_loss, images = train_one_epoch(model, loader, optimizer, device)
        metrics = epoch_metrics(
            model,
            test_loader,
            device,
            epoch,
            train_loss,
            images,
            time.perf_counter() - start,
        )
        history.append(metrics)
        # Every rank reports (report is a barrier); only rank 0 attaches a checkpoint.
        with rank0_checkpoint(
            rank, training_state(model, optimizer, epoch, history)
        ) as checkpoint:
            ray.train.report(metrics, checkpoint=checkpoint)
        if rank == 0:
            print(
                f"[rank 0] epoch {epoch}: train_loss={metrics['train_loss']:.4f}"
                f" accuracy={metrics['accuracy']:.3f}",
                flush=True,
            )


# From 03_ray_data_integration.ipynb, cell 11:
# '# 05. The training loop on a dataset shard'.
def train_loop_ray_data(config: dict) -> None:
    """Lesson 02's loop, its training batches streamed from this worker's shard."""
    # who am I: this worker's rank, and how many workers there are
    context = ray.train.get_context()
    rank, world = context.get_world_rank(), context.get_world_size()
    device = ray.train.torch.get_device()  # this worker's GPU, or the CPU
    # the global batch, split across workers
    batch = per_worker_batch(config["batch_size"], world)
    torch.manual_seed(config["seed"])  # every rank builds the same initial weights
    _, test_ds = data.course_datasets(
        config["train_size"], config["test_size"], config["data_root"], config["seed"]
    )

    # Ray Train: move to this worker's device; wrap in DDP when world > 1, so gradients
    # are averaged.
    model = ray.train.torch.prepare_model(build_resnet18())
    optimizer = torch.optim.Adam(model.parameters(), lr=config["lr"])
    # Ray Train: this worker's part of datasets={"train": ...}, preprocessed by Ray Data
    # tasks.
    shard = ray.train.get_dataset_shard("train")
    # this rank's test digits
    test_loader = data.make_loader(
        data.rank_share(test_ds, rank, world), 512, shuffle=False
    )
    if rank == 0:
        print(
            f"[rank 0] {world} worker(s) on {device}, per-worker batch {batch}",
            flush=True,
        )

    history = []
    for epoch in range(config["epochs"]):
        start = time.perf_counter()
        batches = shard.iter_torch_batches(
            batch_size=batch,
            dtypes={"image": torch.float32, "label": torch.int64},
            device=device,  # batches arrive on this worker's device
            # rows mixed on this worker, no network
            local_shuffle_buffer_size=config["shuffle_buffer"],
            local_shuffle_seed=config["seed"] + epoch,  # a new order every epoch
        )
        # the (images, labels) pairs lesson 01's train_one_epoch takes
        pairs = ((b["image"], b["label"]) for b in batches)
        train_loss, images = train_one_epoch(model, pairs, optimizer, device)
        metrics = epoch_metrics(
            model,
            test_loader,
            device,
            epoch,
            train_loss,
            images,
            time.perf_counter() - start,
        )
        metrics["rows_seen_rank"] = images  # this rank's share of the epoch's rows
        history.append(metrics)
        # Every rank reports (report is a barrier); only rank 0 attaches a checkpoint.
        with rank0_checkpoint(
            rank, training_state(model, optimizer, epoch, history)
        ) as checkpoint:
            ray.train.report(metrics, checkpoint=checkpoint)
        if rank == 0:
            print(
                f"[rank 0] epoch {epoch}: train_loss={metrics['train_loss']:.4f}"
                f" accuracy={metrics['accuracy']:.3f}",
                flush=True,
            )


# From 04_fault_tolerance.ipynb, cell 7:
# '# 03. Automatic retries: a loop that resumes'.
def train_loop_resumable(config: dict) -> None:
    """Lesson 02's loop, resumable: it goes on after the checkpoint's epoch."""
    # who am I: this worker's rank, and how many workers there are
    context = ray.train.get_context()
    rank, world = context.get_world_rank(), context.get_world_size()
    device = ray.train.torch.get_device()  # this worker's GPU, or the CPU
    # the global batch, split across workers
    batch = per_worker_batch(config["batch_size"], world)
    torch.manual_seed(config["seed"])  # every rank builds the same initial weights
    train_ds, test_ds = data.course_datasets(
        config["train_size"], config["test_size"], config["data_root"], config["seed"]
    )

    # Ray Train: move to this worker's device; wrap in DDP when world > 1, so gradients
    # are averaged.
    model = ray.train.torch.prepare_model(build_resnet18())
    optimizer = torch.optim.Adam(model.parameters(), lr=config["lr"])
    # Ray Train: a DistributedSampler gives each worker its own shard; batches land on
    # the device.
    loader = ray.train.torch.prepare_data_loader(
        data.make_loader(train_ds, batch, shuffle=True)
    )
    # this rank's test digits
    test_loader = data.make_loader(
        data.rank_share(test_ds, rank, world), 512, shuffle=False
    )
    if rank == 0:
        print(
            f"[rank 0] {world} worker(s) on {device}, per-worker batch {batch}",
            flush=True,
        )

    start_epoch, history = 0, []
    # None on a fresh start; after a failure, the latest one
    checkpoint = ray.train.get_checkpoint()
    if checkpoint is not None:
        state = load_state(checkpoint)
        # weights (saved without DDP's wrapper)
        unwrap(model).load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])  # Adam's moments
        set_rng_state(state["rng"])
        # the next epoch, and what came before
        start_epoch, history = state["epoch"] + 1, state["history"]
    if rank == 0:
        print(
            "[rank 0]"
            f" {f'resuming at epoch {start_epoch}' if checkpoint else 'fresh start'}",
            flush=True,
        )
    for epoch in range(start_epoch, config["epochs"]):
        if world > 1:
            # otherwise every epoch shuffles the same way
            loader.sampler.set_epoch(epoch)
        start = time.perf_counter()
        # This lesson's crashes on purpose: config["fault"] fires once, before the step
        # it names.
        batches = faults.inject(loader, config.get("fault"), rank=rank, epoch=epoch)
        # lesson 01's, unchanged
        train_loss, images = train_one_epoch(model, batches, optimizer, device)
        metrics = epoch_metrics(
            model,
            test_loader,
            device,
            epoch,
            train_loss,
            images,
            time.perf_counter() - start,
        )
        # which attempt trained this epoch: 0 = the fresh start
        metrics["start_epoch"] = start_epoch
        # the batch each worker trained with: section 13 (Going further) changes the
        # number of workers
        metrics["per_worker_batch"] = batch
        history.append(metrics)
        # Every rank reports (report is a barrier); only rank 0 attaches a checkpoint.
        with rank0_checkpoint(
            rank, training_state(model, optimizer, epoch, history)
        ) as checkpoint:
            ray.train.report(metrics, checkpoint=checkpoint)
        if rank == 0:
            print(
                f"[rank 0] epoch {epoch}: train_loss={metrics['train_loss']:.4f}"
                f" accuracy={metrics['accuracy']:.3f}",
                flush=True,
            )


# From 04_fault_tolerance.ipynb, cell 30:
# '# 12. A loop that saves mid-epoch'.
def train_loop_mid_epoch(config: dict) -> None:
    """Section 03's loop, saving every config["checkpoint_every"] steps with the
    loader's place in the epoch: a restart continues at the next batch."""
    # who am I: this worker's rank, and how many workers there are
    context = ray.train.get_context()
    rank, world = context.get_world_rank(), context.get_world_size()
    device = ray.train.torch.get_device()  # this worker's GPU, or the CPU
    # the global batch, split across workers
    batch = per_worker_batch(config["batch_size"], world)
    torch.manual_seed(config["seed"])  # every rank builds the same initial weights
    train_ds, test_ds = data.course_datasets(
        config["train_size"], config["test_size"], config["data_root"], config["seed"]
    )

    # Ray Train: move to this worker's device; wrap in DDP when world > 1, so gradients
    # are averaged.
    model = ray.train.torch.prepare_model(build_resnet18())
    optimizer = torch.optim.Adam(model.parameters(), lr=config["lr"])
    # Bookkeeping (no effect on training): which digits each rank reads, and where
    # each attempt starts.
    record = resumable.RunRecord()
    train_ds = record.watch(train_ds)  # the same digits, noting each index read
    # This rank's shard, as prepare_data_loader would give it, but in torchdata's
    # StatefulDataLoader: its state_dict() is its place in the epoch. (Not through
    # prepare_data_loader, which would rebuild it as a plain DataLoader.)
    sampler = DistributedSampler(
        train_ds, num_replicas=world, rank=rank, shuffle=True, seed=config["seed"]
    )
    loader = StatefulDataLoader(train_ds, batch_size=batch, sampler=sampler)
    # this rank's test digits
    test_loader = data.make_loader(
        data.rank_share(test_ds, rank, world), 512, shuffle=False
    )

    epoch, step, history, state = 0, 0, [], None
    # None on a fresh start; after a failure, the latest one
    checkpoint = ray.train.get_checkpoint()
    if checkpoint is not None:
        state = load_state(checkpoint)
        # weights (saved without DDP's wrapper)
        unwrap(model).load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])  # Adam's moments
        set_rng_state(state["rng"])
        # where the lost attempt's last save said to go on, and what came before
        epoch, step, history = state["next_epoch"], state["next_step"], state["history"]
        if step:
            # A place in the loader holds only for as many ranks as saved it (each
            # rank's shard depends on the world size): refuse another.
            resumable.check_world_size(state, world)
            # saved mid-epoch: the loader skips the batches trained before the save
            loader.load_state_dict(state["loader"])
    attempt = record.start_attempt(state, world, epoch, step)  # bookkeeping
    if rank == 0:
        print(
            f"[rank 0] attempt {attempt}: {world} worker(s) on {device}, starting at"
            f" epoch {epoch}, step {step}"
            + (" (from the checkpoint)" if state else ""),
            flush=True,
        )
    # "sync" or "async" uploads (section 15); a list takes turns, so the course's
    # checkpoint benchmark measures both in one run.
    uploads = config.get("checkpoint_uploads", ["async"])

    def save(next_epoch: int, next_step: int, metrics: dict) -> None:
        """Report metrics, with a checkpoint that goes on at (next_epoch, next_step)."""
        steps = next_step or len(loader)  # this epoch's batches done
        upload = uploads[len(history) % len(uploads)]
        row = {"epoch": epoch, "step": steps, "world_size": world, **metrics}
        row.update(attempt=attempt, upload=upload)  # bookkeeping
        history.append(row)
        state = training_state(
            model,
            optimizer,
            epoch,
            history,
            next_epoch=next_epoch,
            next_step=next_step,
            # the loader's place in this epoch; at its end, a fresh epoch needs none
            loader=loader.state_dict() if next_step else None,
            world_size=world,
            **record.kept(epoch),  # bookkeeping: digits seen, attempts
        )

        def crash() -> None:  # this lesson's crash while writing, if config says
            faults.maybe_fail(
                config.get("fault"),
                rank=rank,
                epoch=epoch,
                step=steps,
                during="checkpoint",
            )

        started = time.perf_counter()
        if upload == "async":
            # Section 15: rank 0 hands Ray a copy; Ray's thread writes and uploads it.
            checkpoint, upload_fn = rank0_snapshot(rank, state, before_commit=crash)
            ray.train.report(
                dict(row),  # a copy: the row gets its checkpoint_s below
                checkpoint=checkpoint,
                checkpoint_upload_mode=CheckpointUploadMode.ASYNC,
                checkpoint_upload_fn=upload_fn,
            )
        else:
            # Every rank reports (report is a barrier); rank 0 attaches the checkpoint.
            with rank0_checkpoint(rank, state, before_commit=crash) as checkpoint:
                ray.train.report(dict(row), checkpoint=checkpoint)
        # Bookkeeping: how long training waited. `row` is the dict inside `history`,
        # so the figure is saved with the next checkpoint.
        row["checkpoint_s"] = time.perf_counter() - started

    every = config.get("checkpoint_every", 5)
    while epoch < config["epochs"]:
        # the same shuffle as an uninterrupted run of this epoch
        loader.sampler.set_epoch(epoch)
        first, start = step, time.perf_counter()
        model.train()
        total, images = 0.0, 0
        # This lesson's crashes on purpose: config["fault"] fires once, before the step
        # it names.
        batches = faults.inject(
            loader, config.get("fault"), rank=rank, epoch=epoch, first_step=first
        )
        # lesson 01's train_one_epoch, opened up: a save every `every` steps
        for step, (inputs, labels) in enumerate(batches, first):
            record.stepped()  # bookkeeping: when this attempt's first step ran
            loss = train_step(model, inputs, labels, optimizer, device)
            total, images = total + loss * len(labels), images + len(labels)
            if (step + 1) % every == 0 and step + 1 < len(loader):
                save(epoch, step + 1, {})
        train_loss = total / max(images, 1)
        seconds = time.perf_counter() - start
        metrics = epoch_metrics(
            model, test_loader, device, epoch, train_loss, images, seconds
        )
        metrics["partial_epoch"] = first > 0  # this attempt began mid-epoch
        if rank == 0:
            print(
                f"[rank 0] epoch {epoch} done (steps {first}..{len(loader) - 1} in this"
                f" attempt): accuracy={metrics['accuracy']:.3f}",
                flush=True,
            )
        save(epoch + 1, 0, metrics)
        epoch, step = epoch + 1, 0
