"""The training loops: single-process PyTorch, and the per-worker Ray Train loop.

Both share ``train_one_epoch`` and ``evaluate``, so the only difference a learner sees between
lessons 01 and 02 is the Ray Train calls.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader
from tqdm.auto import tqdm

from course_utils import checkpoints, data, faults
from course_utils.config import Profile, get_profile
from course_utils.device import get_device
from course_utils.model import build_resnet18, unwrap
from course_utils.plan import per_worker_batch  # re-exported: lesson 02 imports it from here


def train_one_epoch(
    model: nn.Module,
    loader: DataLoader,
    optimizer: torch.optim.Optimizer,
    device: torch.device,
    *,
    on_step: Callable[[int], None] | None = None,
    progress: bool = False,
    desc: str = "train",
    after_step: Callable[[int], None] | None = None,
) -> float:
    """One pass over ``loader``; returns the mean training loss.

    ``on_step(step)`` runs before each batch (fault injection), ``after_step(step)`` after its
    optimizer step (mid-epoch checkpoints: the loader has yielded exactly ``step + 1`` batches).
    """
    model.train()
    total, count = 0.0, 0
    batches = tqdm(loader, desc=desc, leave=False) if progress else loader
    for step, (images, labels) in enumerate(batches):
        if on_step is not None:
            on_step(step)
        images, labels = images.to(device), labels.to(device)
        optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(images), labels)
        loss.backward()
        optimizer.step()
        total += loss.item() * len(labels)
        count += len(labels)
        if after_step is not None:
            after_step(step)
    return total / max(count, 1)


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


def train_baseline(
    profile: Profile | None = None,
    out_dir: str | Path | None = None,
    device: torch.device | None = None,
    data_root: str | Path | None = None,
    progress: bool = True,
) -> pd.DataFrame:
    """Plain PyTorch on one device: train, evaluate each epoch, save metrics.csv + model.pt.

    Returns the per-epoch metrics. ``out_dir`` must be absolute when run inside Ray; pass
    ``progress=False`` there (a remote task's progress bars arrive as hundreds of log lines).
    """
    profile = profile or get_profile()
    device = device or get_device()
    torch.manual_seed(profile.seed)
    train_ds, test_ds = data.course_datasets(profile.train_size, profile.test_size, data_root, profile.seed)
    train_loader = data.make_loader(train_ds, profile.batch_size, shuffle=True, seed=profile.seed)
    test_loader = data.make_loader(test_ds, 512, shuffle=False)
    model = build_resnet18().to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=profile.lr)
    rows = []
    for epoch in tqdm(range(profile.epochs), desc=f"epochs on {device}", disable=not progress):
        start = time.perf_counter()
        train_loss = train_one_epoch(
            model, train_loader, optimizer, device, progress=progress, desc=f"epoch {epoch}"
        )
        seconds = time.perf_counter() - start
        rows.append(
            {
                "epoch": epoch,
                "train_loss": train_loss,
                **evaluate(model, test_loader, device),
                "epoch_time_s": seconds,
                "images_per_s": len(train_ds) / seconds,
            }
        )
        print(f"epoch {epoch}: train_loss={train_loss:.4f} accuracy={rows[-1]['accuracy']:.3f}", flush=True)
    history = pd.DataFrame(rows)
    if out_dir is not None:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        history.to_csv(out / "metrics.csv", index=False)
        torch.save(model.state_dict(), out / "model.pt")
    return history


def loop_config(profile: Profile | None = None, **overrides: Any) -> dict[str, Any]:
    """The ``train_loop_config`` for ``train_loop_per_worker``: profile + absolute data root."""
    profile = profile or get_profile()
    config = {**profile.to_dict(), "data_root": str(data.data_root())}
    config.update(overrides)
    return config


def _mean_across_workers(value: float, device: torch.device) -> float:
    if not torch.distributed.is_available() or not torch.distributed.is_initialized():
        return value
    t = torch.tensor([value], dtype=torch.float64, device=device)
    torch.distributed.all_reduce(t)
    return t.item() / torch.distributed.get_world_size()


def train_loop_per_worker(config: dict[str, Any]) -> None:
    """What each Ray Train worker runs: the baseline loop plus the Ray Train calls.

    Resumes from ``ray.train.get_checkpoint()`` when there is one, reports metrics and a
    rank-0 checkpoint every epoch, and keeps the full metric history inside the checkpoint.
    """
    import ray.train
    import ray.train.torch

    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    device = ray.train.torch.get_device()
    batch = per_worker_batch(config["batch_size"], world)
    torch.manual_seed(config["seed"])
    data.ensure_mnist(config["data_root"], verbose=False)  # no-op when the driver prepared it
    train_ds, test_ds = data.course_datasets(
        config["train_size"], config["test_size"], config["data_root"], config["seed"]
    )

    # Ray Train: wrap in DDP (world > 1) and move to this worker's device.
    model = ray.train.torch.prepare_model(build_resnet18())
    optimizer = torch.optim.Adam(model.parameters(), lr=config["lr"])
    # Ray Train: a DistributedSampler gives each worker its own shard; batches land on `device`.
    train_loader = ray.train.torch.prepare_data_loader(data.make_loader(train_ds, batch, shuffle=True))
    test_loader = data.make_loader(test_ds, 512, shuffle=False)  # every rank scores the whole test set

    state = checkpoints.restore(model, optimizer, map_location=device)
    start_epoch = state["epoch"] + 1 if state else 0
    history = state["history"] if state else []
    print(
        f"[rank {rank}/{world}] device={device} per-worker batch={batch} "
        f"{'resuming at epoch ' + str(start_epoch) if state else 'fresh start'}",
        flush=True,
    )

    for epoch in range(start_epoch, config["epochs"]):
        sampler = getattr(train_loader, "sampler", None)
        if hasattr(sampler, "set_epoch"):
            sampler.set_epoch(epoch)  # otherwise every epoch shuffles the same way
        start = time.perf_counter()
        train_loss = train_one_epoch(
            model,
            train_loader,
            optimizer,
            device,
            on_step=lambda step, epoch=epoch: faults.maybe_fail(
                config.get("fault"), rank=rank, epoch=epoch, step=step
            ),
        )
        seconds = time.perf_counter() - start
        report_epoch(
            model,
            optimizer,
            epoch,
            history,
            train_loss=train_loss,
            seconds=seconds,
            images=len(train_ds),
            test_loader=test_loader,
            device=device,
            extra={"start_epoch": start_epoch},  # which attempt ran this epoch (lesson 04)
        )


# What train_loop_per_worker reports each epoch: a checkpoint_score_attribute must be one of these.
REPORTED_METRICS = (
    "epoch",
    "train_loss",
    "test_loss",
    "accuracy",
    "epoch_time_s",
    "images_per_s",
    "world_size",
    "start_epoch",
)


def report_epoch(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    epoch: int,
    history: list[dict],
    *,
    train_loss: float,
    seconds: float,
    images: int,
    test_loader: DataLoader,
    device: torch.device,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """End of an epoch on every rank: evaluate, append to ``history``, report with a checkpoint.

    Shared by the DataLoader loop and the Ray Data loop (``raydata.train_loop_ray_data``), so
    both report the same metrics and write the same checkpoints. Returns the epoch's metrics.
    """
    import ray.train

    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    metrics = {
        "epoch": epoch,
        "train_loss": _mean_across_workers(train_loss, device),
        **evaluate(unwrap(model), test_loader, device),
        "epoch_time_s": seconds,
        "images_per_s": images / seconds,
        "world_size": world,
        **(extra or {}),
    }
    history.append(metrics)
    if rank == 0:
        print(
            f"[rank 0] epoch {epoch}: train_loss={metrics['train_loss']:.4f} "
            f"accuracy={metrics['accuracy']:.3f} ({seconds:.1f}s)",
            flush=True,
        )
    checkpoints.report(metrics, checkpoints.training_state(model, optimizer, epoch, history))
    return metrics


def make_trainer(
    name: str,
    profile: Profile | None = None,
    *,
    num_workers: int | tuple[int, int] | None = None,
    num_to_keep: int | None = 2,
    max_failures: int = 0,
    train_loop: Callable = train_loop_per_worker,
    datasets: dict[str, Any] | None = None,
    score_attribute: str | None = "accuracy",
    placement_strategy: str = "PACK",
    **config_overrides: Any,
):
    """The course's standard ``TorchTrainer`` for run ``name`` (what lesson 02 builds step by step).

    Checks the request fits the cluster first, so a too-big run fails now instead of waiting;
    checks an existing run directory of that name is whole (``storage.check_run``), so a damaged
    one fails now instead of silently starting from scratch; and checks ``score_attribute`` is
    a metric the course loop reports (Ray only logs an error and keeps checkpoints unordered);
    ``score_attribute=None`` keeps the most recent checkpoints instead.
    Storage is ``storage.ray_storage()``: a local folder, a shared mount or ``s3://`` alike.
    ``placement_strategy="SPREAD"`` puts the workers on different nodes of a cluster.
    """
    from ray.train import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    from course_utils.session import check_resources
    from course_utils.storage import check_run, ray_storage

    if (
        train_loop is train_loop_per_worker
        and score_attribute is not None
        and score_attribute not in REPORTED_METRICS
    ):
        raise ValueError(
            f"checkpoint_score_attribute {score_attribute!r} is not a metric the course loop reports; "
            f"choose one of {', '.join(REPORTED_METRICS)}."
        )
    profile = profile or get_profile()
    scaling = ScalingConfig(
        num_workers=num_workers or profile.num_workers,
        use_gpu=profile.use_gpu,
        placement_strategy=placement_strategy,
    )
    config = loop_config(profile, **config_overrides)
    check_resources(scaling, config["batch_size"])
    check_run(name)
    storage_path, storage_filesystem = ray_storage()
    return TorchTrainer(
        train_loop,
        train_loop_config=config,
        scaling_config=scaling,
        datasets=datasets,
        run_config=RunConfig(
            name=name,
            storage_path=storage_path,
            storage_filesystem=storage_filesystem,
            checkpoint_config=CheckpointConfig(
                num_to_keep=num_to_keep,
                checkpoint_score_attribute=score_attribute,
                checkpoint_score_order="min"
                if score_attribute and score_attribute.endswith("loss")
                else "max",
            ),
            failure_config=FailureConfig(max_failures=max_failures),
        ),
    )
