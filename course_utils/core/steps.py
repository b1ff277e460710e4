"""One training step, one epoch, one evaluation, for the course's own code: lesson 04's mid-epoch loop, the
exercise checks and the benches. (The loops lessons 01-05 teach write these steps themselves, so that they copy
into a project alone.) ``epoch_metrics`` adds what a distributed run needs: the test set scored once across the
ranks, the sums all-reduced.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader

from course_utils.core.model import unwrap

# What epoch_metrics returns, so what every course loop reports each epoch: a
# checkpoint_score_attribute must be one of these.
REPORTED_METRICS = (
    "epoch",
    "train_loss",
    "test_loss",
    "accuracy",
    "epoch_time_s",
    "images_per_s",
    "eval_s",
    "world_size",
)


def train_step(
    model: nn.Module,
    images: torch.Tensor,
    labels: torch.Tensor,
    optimizer: torch.optim.Optimizer,
    device: torch.device,
) -> float:
    """Forward, loss, backward, optimizer step on one batch; returns the batch's loss."""
    # non_blocking: from a pinned batch (a GPU's loader, device.loader_options) the copy overlaps the GPU's work
    images, labels = images.to(device, non_blocking=True), labels.to(device, non_blocking=True)
    optimizer.zero_grad(set_to_none=True)
    loss = F.cross_entropy(model(images), labels)
    loss.backward()
    optimizer.step()
    return loss.item()


def train_one_epoch(
    model: nn.Module,
    batches: Iterable[tuple[torch.Tensor, torch.Tensor]],
    optimizer: torch.optim.Optimizer,
    device: torch.device,
) -> tuple[float, int]:
    """One pass over ``batches`` (a DataLoader or any iterable of (images, labels)).

    Returns the mean training loss and the number of images trained on.
    """
    model.train()
    total, count = 0.0, 0
    for images, labels in batches:
        total += train_step(model, images, labels, optimizer, device) * len(labels)
        count += len(labels)
    return total / max(count, 1), count


@torch.no_grad()
def evaluate(model: nn.Module, loader: DataLoader, device: torch.device) -> dict[str, float]:
    """Mean loss and accuracy of ``model`` over ``loader``."""
    model.eval()
    loss, correct, count = 0.0, 0, 0
    for images, labels in loader:
        images, labels = images.to(device), labels.to(device)
        logits = model(images)
        loss += F.cross_entropy(logits, labels, reduction="sum").item()
        correct += (logits.argmax(1) == labels).sum().item()
        count += len(labels)
    return {"test_loss": loss / max(count, 1), "accuracy": correct / max(count, 1)}


def sum_across_workers(values: Sequence[float], device: torch.device) -> list[float]:
    """Each of ``values`` summed over all Ray Train workers, in one all-reduce (as given with one worker)."""
    if not torch.distributed.is_available() or not torch.distributed.is_initialized():
        return [float(v) for v in values]
    t = torch.tensor(list(values), dtype=torch.float64, device=device)
    torch.distributed.all_reduce(t)
    return t.tolist()


def _buffers_from_rank0(model: nn.Module) -> None:
    """Copy rank 0's buffers (BatchNorm's running mean and variance) to every worker.

    Why: DDP broadcasts rank 0's buffers at the start of each training forward, and then every rank's
    forward updates its own running statistics from its own batch. After the last step the ranks'
    BatchNorm statistics differ by that one update, and the checkpoint holds rank 0's. Scoring the test
    set in shards with each rank's own statistics then disagreed with the saved model by a digit or two
    in 200 (seen on Ray 2.60 here). One broadcast before evaluating makes every shard score the model
    that is saved. A no-op outside a distributed run.
    """
    if not torch.distributed.is_available() or not torch.distributed.is_initialized():
        return
    for buffer in unwrap(model).buffers():
        torch.distributed.broadcast(buffer, src=0)


def epoch_metrics(
    model: nn.Module,
    test_loader: DataLoader,
    device: torch.device,
    epoch: int,
    train_loss: float,
    images: int,
    seconds: float,
) -> dict[str, Any]:
    """An epoch's metrics: loss and throughput over all workers, and the test set scored once
    across the ranks (``test_loader`` holds this rank's share; the sums are all-reduced).

    ``eval_s`` is the seconds this rank spent scoring its share: with every rank scoring the
    whole set it would be ``world`` times as long and nothing more is learned.
    """
    start = time.perf_counter()
    # Each rank's last step updated its own BatchNorm statistics (DDP syncs them only at the next
    # training forward): score every shard with rank 0's, the ones its checkpoint saves.
    _buffers_from_rank0(model)
    scores = evaluate(unwrap(model), test_loader, device)
    eval_s = time.perf_counter() - start
    scored = len(test_loader.dataset)
    world, loss_sum, images_sum, scored_sum, test_loss_sum, hits_sum = sum_across_workers(
        [1, train_loss, images, scored, scores["test_loss"] * scored, scores["accuracy"] * scored], device
    )
    return {
        "epoch": epoch,
        "train_loss": loss_sum / world,
        "test_loss": test_loss_sum / scored_sum,
        "accuracy": hits_sum / scored_sum,
        "epoch_time_s": seconds,
        "images_per_s": images_sum / seconds,
        "eval_s": eval_s,
        "world_size": int(world),
    }
