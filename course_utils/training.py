"""Lesson 01's single-process loop, and the ``TorchTrainer`` a lesson's fit is built with (``make_trainer``).

Every lesson's loop shares ``course_utils.steps``, so what a learner sees differ is the Ray Train calls.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from course_utils import data
from course_utils.config import Profile, data_root, get_profile
from course_utils.device import get_device
from course_utils.model import build_resnet18
from course_utils.progress import progress_bar
from course_utils.steps import REPORTED_METRICS, evaluate, train_one_epoch


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
    for epoch in progress_bar(range(profile.epochs), desc=f"epochs on {device}", disable=not progress):
        start = time.perf_counter()
        batches = progress_bar(train_loader, desc=f"epoch {epoch}", leave=False, disable=not progress)
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
    config = {**profile.to_dict(), "data_root": str(data_root())}
    config.update(overrides)
    return config


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

    Fails now, not later, when the request cannot fit the cluster, when a run directory of that name
    is damaged (``storage.check_run``: Ray would silently start from scratch), or when
    ``score_attribute`` is not one of ``reported_metrics`` (Ray only logs an error and keeps
    checkpoints unordered); ``score_attribute=None`` keeps the most recent checkpoints.
    ``placement_strategy="SPREAD"`` puts the workers on different nodes.
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
