"""The code the lessons teach, exported from their ``#@save`` cells. GENERATED: do not edit.

Edit the cell in the lesson named above each definition, then run ``./build.sh export``
(``course_utils.export``); ``tests/unit/test_export.py`` fails while the two differ.
"""

from __future__ import annotations

import time

import ray.train
import ray.train.torch
import torch

from course_utils import data
from course_utils.checkpoints import rank0_checkpoint, training_state
from course_utils.model import build_resnet18
from course_utils.plan import per_worker_batch
from course_utils.steps import epoch_metrics, train_one_epoch


# From 02_ray_train_migration.ipynb, cell 5 ('# 02. The function every worker runs').
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
    test_loader = data.make_loader(data.rank_share(test_ds, rank, world), 512, shuffle=False)  # section 10
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
        # Every rank reports (report is a barrier); only rank 0 attaches a checkpoint (section 04).
        with rank0_checkpoint(rank, training_state(model, optimizer, epoch, history)) as checkpoint:
            ray.train.report(metrics, checkpoint=checkpoint)
        if rank == 0:
            print(f"[rank 0] epoch {epoch}: train_loss={metrics['train_loss']:.4f} accuracy={metrics['accuracy']:.3f}", flush=True)
