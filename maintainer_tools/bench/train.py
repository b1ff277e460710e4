"""``python -m maintainer_tools.bench train``: plain PyTorch vs Ray Train images/s on the same cores
(lesson 02). Measures lesson 01's ``train_baseline`` against lesson 02's ``train_loop_per_worker`` (``lesson_code``)."""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Sequence

import torch
from ray.train import RunConfig, ScalingConfig
from ray.train.torch import TorchTrainer

from course_utils.core import data
from course_utils.core.compare import steady
from course_utils.core.config import SMOKE
from course_utils.core.history import metric_history
from course_utils.core.session import start_ray
from course_utils.core.training import loop_config
from course_utils.lesson_code import train_baseline, train_loop_per_worker


def main(argv: Sequence[str] | None = None) -> float:
    """Plain PyTorch vs Ray Train images/s, same cores.

    Runs the single-process baseline, then Ray Train with 2 workers x 1 CPU and 1 worker x 2 CPUs,
    on the same data and global batch, in this one process run. Throughput is the median over
    epochs after the first (the first pays for warm-up), training time only (evaluation and
    Ray's start-up excluded: they are reported separately). Prints the ratio best Ray / plain.
    """
    if "--gpu" in (argv or []):  # the GPU comparison: its own module, its own options
        from maintainer_tools.bench import gpu

        return gpu.main([a for a in argv if a != "--gpu"])
    parser = argparse.ArgumentParser(
        prog="python -m maintainer_tools.bench train",
        epilog="--gpu: plain PyTorch vs Ray Train vs Ray Train + Ray Data on one GPU (maintainer_tools.bench.gpu)",
    )
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--train-size", type=int, default=4000)
    parser.add_argument("--batch-size", type=int, default=128)
    args = parser.parse_args(argv)
    profile = SMOKE.with_(
        epochs=args.epochs, train_size=args.train_size, test_size=500, batch_size=args.batch_size
    )
    cores = os.cpu_count() or 1
    data.ensure_mnist(verbose=False)

    print(f"cores: {cores}\nimages_per_epoch: {args.train_size}\nglobal_batch: {args.batch_size}")
    torch.set_num_threads(cores)
    with tempfile.TemporaryDirectory() as out_dir:
        plain = steady([row["images_per_s"] for row in train_baseline(loop_config(profile), out_dir)])
    print(f"plain_pytorch_{cores}_threads_images_per_s: {plain:.0f}")
    start_ray(verbose=False, log_to_driver=False)  # workers' per-epoch logs would bury the figures
    results = {}
    with tempfile.TemporaryDirectory() as storage_dir:
        for workers, cpus in ((2, 1), (1, cores)):
            label = f"ray_train_{workers}x{cpus}cpu"
            started = time.perf_counter()
            result = TorchTrainer(
                train_loop_per_worker,
                train_loop_config=loop_config(profile),
                scaling_config=ScalingConfig(num_workers=workers, resources_per_worker={"CPU": cpus}),
                run_config=RunConfig(name=label, storage_path=storage_dir),
            ).fit()
            wall = time.perf_counter() - started
            history = metric_history(result)
            results[label] = steady(history["images_per_s"].tolist())
            overhead = wall - history["epoch_time_s"].sum()
            print(f"{label}_images_per_s: {results[label]:.0f}")
            print(f"{label}_fit_wall_s: {wall:.1f}")
            print(f"{label}_startup_and_eval_s: {overhead:.1f}")
    best = max(results, key=results.get)
    ratio = results[best] / plain
    print(f"best_ray_layout: {best}")
    print(f"ratio_ray_train_vs_plain: {ratio:.2f}")
    return ratio
