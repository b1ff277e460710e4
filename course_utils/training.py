"""The training pieces: single-process PyTorch (lesson 01) and what lesson 02's per-worker loop calls.

Lesson 01's loop and lesson 02's ``train_loop_per_worker`` (written in lesson 02, exported to
``course_utils.lesson_code``) share ``train_step``, ``train_one_epoch`` and ``evaluate``, so the only
difference a learner sees between them is the Ray Train calls. Lessons 03 and 04 build their loops
on ``setup_worker`` and these pieces.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from course_utils import bars, checkpoints, data
from course_utils.config import Profile, get_profile
from course_utils.device import get_device
from course_utils.model import build_resnet18
from course_utils.plan import per_worker_batch  # re-exported: lesson 02 imports it from here

# Re-exported (``x as x``): lessons 01, 02 and 04 and the loops here import the shared steps from training.
from course_utils.steps import epoch_metrics as epoch_metrics
from course_utils.steps import evaluate as evaluate
from course_utils.steps import sum_across_workers as sum_across_workers
from course_utils.steps import train_one_epoch as train_one_epoch
from course_utils.steps import train_step as train_step


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
    for epoch in bars.bar(range(profile.epochs), desc=f"epochs on {device}", disable=not progress):
        start = time.perf_counter()
        batches = bars.bar(train_loader, desc=f"epoch {epoch}", leave=False, disable=not progress)
        train_loss, images = train_one_epoch(model, batches, optimizer, device)
        seconds = time.perf_counter() - start
        rows.append(
            {
                "epoch": epoch,
                "train_loss": train_loss,
                **evaluate(model, test_loader, device),
                "epoch_time_s": seconds,
                "images_per_s": images / seconds,
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


@dataclass
class Worker:
    """What ``setup_worker`` prepared on one Ray Train worker: every course loop starts from it."""

    rank: int
    world: int
    device: torch.device
    batch: int  # this worker's share of the global batch
    model: nn.Module  # on ``device``, wrapped in DistributedDataParallel when world > 1
    optimizer: torch.optim.Optimizer
    train_ds: Dataset
    test_loader: DataLoader  # this rank's share of the test set

    def epoch_metrics(self, epoch: int, train_loss: float, images: int, seconds: float) -> dict[str, Any]:
        """``epoch_metrics`` for this worker's model and test share."""
        return epoch_metrics(self.model, self.test_loader, self.device, epoch, train_loss, images, seconds)

    def print_epoch(self, metrics: dict[str, Any]) -> None:
        """One line per epoch in the notebook, from rank 0 only: the loss and accuracy it reported."""
        if self.rank == 0:
            print(
                f"[rank 0] epoch {metrics['epoch']}: train_loss={metrics['train_loss']:.4f} "
                f"accuracy={metrics['accuracy']:.3f}",
                flush=True,
            )

    def state(self, epoch: int, history: list[dict], **extra: Any) -> dict[str, Any]:
        """What a checkpoint holds: weights, optimizer, epoch, history, RNG (``checkpoints.training_state``)."""
        return checkpoints.training_state(self.model, self.optimizer, epoch, history, **extra)


def setup_worker(config: dict[str, Any]) -> Worker:
    """The start of every Ray Train worker's loop: who am I, my device, my batch, my model."""
    import ray.train
    import ray.train.torch

    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    device = ray.train.torch.get_device()
    batch = per_worker_batch(config["batch_size"], world)  # the global batch, split across workers
    torch.manual_seed(config["seed"])  # every rank builds the same initial weights
    train_ds, test_ds = data.course_datasets(
        config["train_size"], config["test_size"], config["data_root"], config["seed"]
    )
    # Ray Train: move to this worker's device, wrap in DDP (world > 1) so gradients are averaged.
    model = ray.train.torch.prepare_model(build_resnet18())
    optimizer = torch.optim.Adam(model.parameters(), lr=config["lr"])
    test_ds = data.rank_share(test_ds, rank, world)  # every world-th digit: the set once in all
    if rank == 0:
        print(f"[rank 0] {world} worker(s) on {device}, per-worker batch {batch}", flush=True)
    return Worker(
        rank, world, device, batch, model, optimizer, train_ds, data.make_loader(test_ds, 512, shuffle=False)
    )


# What train_loop_per_worker reports each epoch: a checkpoint_score_attribute must be one of these.
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


def make_trainer(
    name: str,
    profile: Profile | None = None,
    *,
    num_workers: int | tuple[int, int] | None = None,
    num_to_keep: int | None = 2,
    max_failures: int = 0,
    train_loop: Callable | None = None,
    datasets: dict[str, Any] | None = None,
    score_attribute: str | None = "accuracy",
    placement_strategy: str = "PACK",
    reported_metrics: Sequence[str] | None = None,
    **config_overrides: Any,
):
    """The course's standard ``TorchTrainer`` for run ``name`` (what lesson 02 builds step by step).

    Checks the request fits the cluster first, so a too-big run fails now instead of waiting;
    checks an existing run directory of that name is whole (``storage.check_run``), so a damaged
    one fails now instead of silently starting from scratch; and checks ``score_attribute`` is
    one of ``reported_metrics``, what ``train_loop`` reports (Ray only logs an error and keeps
    checkpoints unordered; the course loop's are known, another loop's are checked when given);
    ``score_attribute=None`` keeps the most recent checkpoints instead.
    Storage is ``storage.ray_storage()``: a local folder, a shared mount or ``s3://`` alike.
    ``placement_strategy="SPREAD"`` puts the workers on different nodes of a cluster.
    """
    from ray.train import CheckpointConfig, FailureConfig, LoggingConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    from course_utils import history, logs
    from course_utils.session import check_resources, ready_for_fits
    from course_utils.storage import check_run, ray_storage

    if train_loop is None:  # lesson 02's loop, exported from its #@save cell
        from course_utils.lesson_code import train_loop_per_worker

        train_loop = train_loop_per_worker
        reported_metrics = REPORTED_METRICS if reported_metrics is None else reported_metrics
    if (
        score_attribute is not None
        and reported_metrics is not None
        and score_attribute not in reported_metrics
    ):
        raise ValueError(
            f"checkpoint_score_attribute {score_attribute!r} is not a metric the loop reports; "
            f"choose one of {', '.join(reported_metrics)}."
        )
    profile = profile or get_profile()
    scaling = ScalingConfig(
        num_workers=num_workers or profile.num_workers,
        use_gpu=profile.use_gpu,
        placement_strategy=placement_strategy,
    )
    config = loop_config(profile, **config_overrides)
    check_resources(scaling, config["batch_size"])
    ready_for_fits()  # the fit's first request to Ray's autoscaling coordinator finds it up
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
            logging_config=LoggingConfig(log_level=logs.TRAIN_LOG_LEVEL),  # Ray Train's INFO: to its logs
            callbacks=[history.ReportLog()],  # every report's metrics, for metric_history and fit_progress
        ),
    )
