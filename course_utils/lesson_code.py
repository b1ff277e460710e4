"""The Ray Train loops lessons 02-04 teach, exported from the lessons' ``#@save`` cells. GENERATED: do not edit.

Edit the cell in the lesson named above each definition, then run ``./build.sh export``
(``course_utils.export``); ``tests/unit/test_export.py`` fails while the two differ.
"""

from __future__ import annotations

import time

import ray.train
import ray.train.torch
import torch

from course_utils import data, faults
from course_utils.checkpoints import load_state, rank0_checkpoint, set_rng_state, training_state
from course_utils.columns import IMAGE, LABEL, image_label_pairs
from course_utils.model import build_resnet18, unwrap
from course_utils.plan import per_worker_batch
from course_utils.steps import epoch_metrics, train_one_epoch


# From 02_ray_train_migration.ipynb, cell 6 ('# 02. The function every worker runs').
def train_loop_per_worker(config: dict) -> None:
    """What each Ray Train worker runs: lesson 01's loop plus the Ray Train calls."""
    context = ray.train.get_context()  # who am I: this worker's rank, and how many workers there are
    rank, world = context.get_world_rank(), context.get_world_size()
    device = ray.train.torch.get_device()  # this worker's GPU, or the CPU
    batch = per_worker_batch(config["batch_size"], world)  # the global batch, split across workers
    torch.manual_seed(config["seed"])  # every rank builds the same initial weights
    train_ds, test_ds = data.course_datasets(config["train_size"], config["test_size"], config["data_root"], config["seed"])

    # Ray Train: move to this worker's device; wrap in DDP when world > 1, so gradients are averaged.
    model = ray.train.torch.prepare_model(build_resnet18())
    optimizer = torch.optim.Adam(model.parameters(), lr=config["lr"])
    # Ray Train: a DistributedSampler gives each worker its own shard; batches land on the device.
    loader = ray.train.torch.prepare_data_loader(data.make_loader(train_ds, batch, shuffle=True))
    test_loader = data.make_loader(data.rank_share(test_ds, rank, world), 512, shuffle=False)  # this rank's test digits
    if rank == 0:
        print(f"[rank 0] {world} worker(s) on {device}, per-worker batch {batch}", flush=True)

    history = []
    for epoch in range(config["epochs"]):
        if world > 1:
            loader.sampler.set_epoch(epoch)  # otherwise every epoch shuffles the same way
        start = time.perf_counter()
        train_loss, images = train_one_epoch(model, loader, optimizer, device)  # lesson 01's, unchanged
        metrics = epoch_metrics(model, test_loader, device, epoch, train_loss, images, time.perf_counter() - start)
        history.append(metrics)
        # Every rank reports (report is a barrier); only rank 0 attaches a checkpoint.
        with rank0_checkpoint(rank, training_state(model, optimizer, epoch, history)) as checkpoint:
            ray.train.report(metrics, checkpoint=checkpoint)
        if rank == 0:
            print(f"[rank 0] epoch {epoch}: train_loss={metrics['train_loss']:.4f} accuracy={metrics['accuracy']:.3f}", flush=True)


# From 03_ray_data_integration.ipynb, cell 22 ('# 10. The training loop on a dataset shard').
def train_loop_ray_data(config: dict) -> None:
    """Lesson 02's loop with the training batches streamed from this worker's Ray Data shard."""
    context = ray.train.get_context()  # who am I: this worker's rank, and how many workers there are
    rank, world = context.get_world_rank(), context.get_world_size()
    device = ray.train.torch.get_device()  # this worker's GPU, or the CPU
    batch = per_worker_batch(config["batch_size"], world)  # the global batch, split across workers
    torch.manual_seed(config["seed"])  # every rank builds the same initial weights
    _, test_ds = data.course_datasets(config["train_size"], config["test_size"], config["data_root"], config["seed"])

    # Ray Train: move to this worker's device; wrap in DDP when world > 1, so gradients are averaged.
    model = ray.train.torch.prepare_model(build_resnet18())
    optimizer = torch.optim.Adam(model.parameters(), lr=config["lr"])
    # Ray Train: this worker's part of datasets={"train": ...}, preprocessed by Ray Data tasks.
    shard = ray.train.get_dataset_shard("train")
    test_loader = data.make_loader(data.rank_share(test_ds, rank, world), 512, shuffle=False)  # this rank's test digits
    if rank == 0:
        print(f"[rank 0] {world} worker(s) on {device}, per-worker batch {batch}", flush=True)

    history = []
    for epoch in range(config["epochs"]):
        start = time.perf_counter()
        batches = shard.iter_torch_batches(
            batch_size=batch,
            dtypes={IMAGE: torch.float32, LABEL: torch.int64},
            device=device,  # batches arrive on this worker's device
            local_shuffle_buffer_size=config["shuffle_buffer"],  # rows mixed on this worker, no network
            local_shuffle_seed=config["seed"] + epoch,  # a new order every epoch
        )
        train_loss, images = train_one_epoch(model, image_label_pairs(batches), optimizer, device)
        metrics = epoch_metrics(model, test_loader, device, epoch, train_loss, images, time.perf_counter() - start)
        metrics["rows_seen_rank"] = images  # this rank's share of the epoch's rows
        history.append(metrics)
        # Every rank reports (report is a barrier); only rank 0 attaches a checkpoint.
        with rank0_checkpoint(rank, training_state(model, optimizer, epoch, history)) as checkpoint:
            ray.train.report(metrics, checkpoint=checkpoint)
        if rank == 0:
            print(f"[rank 0] epoch {epoch}: train_loss={metrics['train_loss']:.4f} accuracy={metrics['accuracy']:.3f}", flush=True)


# From 04_fault_tolerance.ipynb, cell 7 ('# 03. Automatic retries: a loop that resumes').
def train_loop_resumable(config: dict) -> None:
    """Lesson 02's loop, resumable: it continues after the epoch of ``ray.train.get_checkpoint()``."""
    context = ray.train.get_context()  # who am I: this worker's rank, and how many workers there are
    rank, world = context.get_world_rank(), context.get_world_size()
    device = ray.train.torch.get_device()  # this worker's GPU, or the CPU
    batch = per_worker_batch(config["batch_size"], world)  # the global batch, split across workers
    torch.manual_seed(config["seed"])  # every rank builds the same initial weights
    train_ds, test_ds = data.course_datasets(config["train_size"], config["test_size"], config["data_root"], config["seed"])

    # Ray Train: move to this worker's device; wrap in DDP when world > 1, so gradients are averaged.
    model = ray.train.torch.prepare_model(build_resnet18())
    optimizer = torch.optim.Adam(model.parameters(), lr=config["lr"])
    # Ray Train: a DistributedSampler gives each worker its own shard; batches land on the device.
    loader = ray.train.torch.prepare_data_loader(data.make_loader(train_ds, batch, shuffle=True))
    test_loader = data.make_loader(data.rank_share(test_ds, rank, world), 512, shuffle=False)  # this rank's test digits
    if rank == 0:
        print(f"[rank 0] {world} worker(s) on {device}, per-worker batch {batch}", flush=True)

    start_epoch, history = 0, []
    checkpoint = ray.train.get_checkpoint()  # None on a fresh start; after a failure, the latest one
    if checkpoint is not None:
        state = load_state(checkpoint)
        unwrap(model).load_state_dict(state["model"])  # weights (saved without DDP's wrapper)
        optimizer.load_state_dict(state["optimizer"])  # Adam's moments
        set_rng_state(state["rng"])
        start_epoch, history = state["epoch"] + 1, state["history"]  # the next epoch, and what came before
    if rank == 0:
        print(f"[rank 0] {f'resuming at epoch {start_epoch}' if checkpoint else 'fresh start'}", flush=True)
    for epoch in range(start_epoch, config["epochs"]):
        if world > 1:
            loader.sampler.set_epoch(epoch)  # otherwise every epoch shuffles the same way
        start = time.perf_counter()
        # This lesson's crashes on purpose: config["fault"] fires once, before the step it names.
        batches = faults.inject(loader, config.get("fault"), rank=rank, epoch=epoch)
        train_loss, images = train_one_epoch(model, batches, optimizer, device)  # lesson 01's, unchanged
        metrics = epoch_metrics(model, test_loader, device, epoch, train_loss, images, time.perf_counter() - start)
        metrics["start_epoch"] = start_epoch  # which attempt trained this epoch: 0 = the fresh start
        history.append(metrics)
        # Every rank reports (report is a barrier); only rank 0 attaches a checkpoint.
        with rank0_checkpoint(rank, training_state(model, optimizer, epoch, history)) as checkpoint:
            ray.train.report(metrics, checkpoint=checkpoint)
        if rank == 0:
            print(f"[rank 0] epoch {epoch}: train_loss={metrics['train_loss']:.4f} accuracy={metrics['accuracy']:.3f}", flush=True)
