"""A loop's ``train_loop_config`` (``loop_config``), and the ``TorchTrainer`` a lesson's fit is built with
(``make_trainer``). The loops themselves are written in the lessons (``lesson_code`` is generated from them)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from course_utils.core import data, history
from course_utils.core.config import Profile, data_root, get_profile
from course_utils.core.session import check_resources, ready_for_fits
from course_utils.core.steps import REPORTED_METRICS
from course_utils.core.storage import Storage
from course_utils.internals import logs


def loop_config(profile: Profile | None = None, **overrides: Any) -> dict[str, Any]:
    """The ``train_loop_config`` for ``train_loop_per_worker``: profile + absolute data root, where
    every node of the cluster has MNIST (``data.ensure_mnist_on_nodes``)."""
    profile = profile or get_profile()
    config = {**profile.to_dict(), "data_root": str(data_root())}
    config.update(overrides)
    data.ensure_mnist_on_nodes(config["data_root"])
    return config


def make_trainer(
    name: str,
    profile: Profile | None = None,
    *,
    store: Storage,
    train_loop: Callable,
    num_workers: int | tuple[int, int] | None = None,
    num_to_keep: int | None = 2,
    max_failures: int = 0,
    datasets: dict[str, Any] | None = None,
    score_attribute: str | None = "accuracy",
    placement_strategy: str = "PACK",
    reported_metrics: Sequence[str] | None = REPORTED_METRICS,
    **config_overrides: Any,
):
    """The course's standard ``TorchTrainer`` for run ``name`` (what lesson 02 builds step by step), fitting
    ``train_loop``: a lesson's loop, passed in (the package never imports the code generated from lessons),
    its runs in ``store`` (``ray_session.storage``).

    Fails now, not later, when the request cannot fit the cluster, when a run directory of that name
    is damaged (``Storage.check_run``: Ray would silently start from scratch), or when
    ``score_attribute`` is not one of ``reported_metrics`` (Ray only logs an error and keeps
    checkpoints unordered); ``score_attribute=None`` keeps the most recent checkpoints.
    ``placement_strategy="SPREAD"`` puts the workers on different nodes.
    """
    from ray.train import CheckpointConfig, FailureConfig, LoggingConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

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
    store.check_run(name)
    storage_path, storage_filesystem = store.for_ray()
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
