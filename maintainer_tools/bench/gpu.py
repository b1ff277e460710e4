"""``python -m maintainer_tools.bench train --gpu``: does the GPU do the work?

Four ways to train the same ResNet-18 on the same digits and global batch, on one GPU, side by side:

- ``plain``: lesson 01's loop (``steps.train_one_epoch``) over lesson 01's DataLoader (``data.make_loader``);
- ``ray_train``: Ray Train, 1 worker with 1 GPU, lesson 02's loop (``lesson_code.train_loop_per_worker``);
- ``ray_data``: Ray Train fed by Ray Data, lesson 03's loop (``lesson_code.train_loop_ray_data``);
- ``ceiling``: the same model and step on batches already in GPU memory: no loader at all.

Each prints its images/s (median of the epochs after the first, which pays for warm-up) and the GPU's
busy share (NVML, sampled every 0.2 s on a ``periodic.every`` thread) from the end of its first epoch to the end of its last (Ray
Train's include each epoch's evaluation and checkpoint, which the loop runs between epochs). The digits
on disk are tiled to ``--rows`` (60,000 by default) so an epoch lasts long enough to measure. It ends
with ``ray_train_vs_plain_gpu_ratio`` and ``plain_vs_ceiling_ratio``.

Without a GPU it says so in one line and exits 0. ``--cpu-rehearsal`` runs the same steps on the CPU
with tiny sizes (the tests do, so the bench is known to run before a GPU machine is paid for); its
figures mean nothing about GPUs.
"""

from __future__ import annotations

import argparse
import math
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from course_utils.core import data, device, steps, training
from course_utils.core.compare import steady
from course_utils.core.config import SMOKE, Profile
from course_utils.core.model import build_resnet18
from course_utils.core.storage import resolve as resolve_storage
from course_utils.internals.periodic import every
from course_utils.lesson03 import raydata
from maintainer_tools import fits
from maintainer_tools.bench.common import print_lines

NO_GPU = "bench train --gpu: no GPU visible to PyTorch here, so there is nothing to measure (exit 0)"


def gpu_busy_reader() -> Callable[[], float | None]:
    """A function returning the GPU's busy percentage now: NVML through ``torch.cuda.utilization``
    (needs ``nvidia-ml-py``), else ``nvidia-smi``; None when neither answers."""
    try:
        torch.cuda.utilization(0)
        return lambda: float(torch.cuda.utilization(0))
    except Exception:
        pass
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return lambda: None

    def read() -> float | None:
        out = subprocess.run(
            [smi, "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits", "-i", "0"],
            capture_output=True,
            text=True,
            timeout=10,
        )
        try:
            return float(out.stdout.strip().splitlines()[0])
        except (ValueError, IndexError):
            return None

    return read


class BusySampler:
    """The GPU's busy share, sampled by ``sample`` (run it with ``periodic.every``); ``mean(t0, t1)``
    over a window of ``time.time()`` stamps."""

    def __init__(self, read: Callable[[], float | None], every_s: float = 0.2):
        self.read, self.every_s = read, every_s
        self.samples: list[tuple[float, float]] = []

    def sample(self) -> None:
        value = self.read()
        if value is not None:
            self.samples.append((time.time(), value))

    def mean(self, start: float, end: float) -> float:
        """Mean busy % in [start, end]; NaN without samples there."""
        inside = [v for t, v in self.samples if start <= t <= end]
        return statistics.fmean(inside) if inside else float("nan")


def tiled_copy(root: Path, rows: int) -> tuple[Path, int]:
    """The course's training digits tiled to at least ``rows`` (the first ``rows`` when there are more),
    and its test digits, written as MNIST's raw files under ``root``; (root, training rows)."""
    train_x, train_y = data.raw_arrays(True)
    test_x, test_y = data.raw_arrays(False)
    if rows < len(train_y):
        train_x, train_y = train_x[:rows], train_y[:rows]
    copies = max(1, math.ceil(rows / len(train_y)))
    data.write_mnist(root, (np.tile(train_x, (copies, 1, 1)), np.tile(train_y, copies)), (test_x, test_y))
    return root, len(train_y) * copies


def plain(profile: Profile, root: Path, sampler: BusySampler) -> dict[str, float]:
    """Lesson 01's loop and loader in this process."""
    dev = device.get_device()
    torch.manual_seed(profile.seed)
    train_ds, _ = data.course_datasets(None, profile.test_size, root, profile.seed)
    loader = data.make_loader(train_ds, profile.batch_size, shuffle=True, seed=profile.seed)
    model = build_resnet18().to(dev)
    optimizer = torch.optim.Adam(model.parameters(), lr=profile.lr)
    return _epochs(profile.epochs, lambda: steps.train_one_epoch(model, loader, optimizer, dev), sampler)


def ceiling(profile: Profile, root: Path, sampler: BusySampler) -> dict[str, float]:
    """The same model and step on batches already on the device: what the GPU does with no loader."""
    dev = device.get_device()
    torch.manual_seed(profile.seed)
    train_x, train_y = data.raw_arrays(True, root=root)
    from course_utils.core.batch_format import to_model_input

    images, labels = to_model_input(train_x).to(dev), torch.as_tensor(train_y).to(dev)
    model = build_resnet18().to(dev)
    optimizer = torch.optim.Adam(model.parameters(), lr=profile.lr)
    batch = profile.batch_size

    def epoch() -> tuple[float, int]:
        order = torch.randperm(len(labels), device=dev)
        batches = (
            (images[order[i : i + batch]], labels[order[i : i + batch]]) for i in range(0, len(labels), batch)
        )
        return steps.train_one_epoch(model, batches, optimizer, dev)

    return _epochs(profile.epochs, epoch, sampler)


def _epochs(
    epochs: int, run_epoch: Callable[[], tuple[float, int]], sampler: BusySampler
) -> dict[str, float]:
    rates, ends = [], [time.time()]  # ends[0]: when the first epoch started
    for _ in range(epochs):
        start = time.perf_counter()
        _, count = run_epoch()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        rates.append(count / (time.perf_counter() - start))
        ends.append(time.time())
    # The same epochs as steady(): after the first, or the only one
    window_start = ends[1] if epochs > 1 else ends[0]
    return {"images_per_s": steady(rates), "gpu_busy_pct": sampler.mean(window_start, ends[-1])}


def ray_fit(
    name: str, profile: Profile, root: Path, storage: Path, sampler: BusySampler, ray_data: bool
) -> dict[str, float]:
    """One Ray Train worker (with the GPU unless rehearsing on the CPU), lesson 02's or 03's loop."""
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    from course_utils.core.history import ReportLog, read_reports, run_folder

    config = training.loop_config(profile, data_root=str(root), shuffle_buffer=raydata.SHUFFLE_BUFFER)
    datasets = None
    from course_utils.lesson_code import train_loop_per_worker, train_loop_ray_data

    loop = train_loop_per_worker
    if ray_data:
        parquet = raydata.export_mnist_parquet(
            "train",
            None,
            path=storage / f"{name}-parquet",
            data_root=root,
            num_files=8,
            store=resolve_storage(),
        )
        datasets, loop = {"train": fits.training_dataset(parquet)}, train_loop_ray_data
    TorchTrainer(
        loop,
        train_loop_config=config,
        scaling_config=ScalingConfig(num_workers=1, use_gpu=profile.use_gpu),
        datasets=datasets,
        run_config=RunConfig(name=name, storage_path=str(storage), callbacks=[ReportLog()]),
    ).fit()
    rows = read_reports(*run_folder(str(storage), None, name))
    rates = [row["images_per_s"] for row in rows]
    stamps = [row["reported_at"] for row in rows]
    busy = sampler.mean(stamps[0], stamps[-1]) if len(stamps) > 1 else float("nan")
    return {"images_per_s": steady(rates), "gpu_busy_pct": busy}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m maintainer_tools.bench train --gpu")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--rows", type=int, default=60_000, help="training rows per epoch (digits tiled)")
    parser.add_argument("--batch-size", type=int, default=256, help="the global batch, the same for all four")
    parser.add_argument("--cpu-rehearsal", action="store_true", help="run the steps on the CPU (tests)")
    args = parser.parse_args(argv)
    on_gpu = device.has_gpu()
    if not on_gpu and not args.cpu_rehearsal:
        print(NO_GPU)
        return 0
    from course_utils.core.session import start_ray

    data.ensure_mnist(verbose=False)
    read = gpu_busy_reader() if on_gpu else (lambda: None)
    with tempfile.TemporaryDirectory(prefix="bench-gpu-") as tmp:
        root, rows = tiled_copy(Path(tmp) / "data", args.rows)
        profile = SMOKE.with_(
            name="bench-gpu",
            num_workers=1,
            use_gpu=on_gpu,
            epochs=args.epochs,
            train_size=rows,
            test_size=500,
            batch_size=args.batch_size,
        )
        where = (
            torch.cuda.get_device_name(0)
            if on_gpu
            else "CPU (rehearsal: these figures say nothing about GPUs)"
        )
        print_lines(
            {
                "device": where,
                "images_per_epoch": rows,
                "global_batch": args.batch_size,
                "epochs": args.epochs,
            }
        )
        results: dict[str, dict[str, float]] = {}
        sampler = BusySampler(read)
        with every(sampler.sample, sampler.every_s, "gpu-busy-sampler"):
            results["plain"] = plain(profile, root, sampler)
            results["ceiling"] = ceiling(profile, root, sampler)
            start_ray(verbose=False, log_to_driver=False)  # workers' per-epoch lines would bury the figures
            storage = Path(tmp) / "runs"
            results["ray_train"] = ray_fit("ray-train-1gpu", profile, root, storage, sampler, ray_data=False)
            results["ray_data"] = ray_fit("ray-data-1gpu", profile, root, storage, sampler, ray_data=True)
        lines: dict[str, Any] = {}
        for name in ("plain", "ray_train", "ray_data", "ceiling"):
            lines[f"{name}_images_per_s"] = round(results[name]["images_per_s"], 1)
            lines[f"{name}_gpu_busy_pct"] = round(results[name]["gpu_busy_pct"], 1)
        rate = {name: r["images_per_s"] for name, r in results.items()}
        lines["ray_data_vs_plain_gpu_ratio"] = rate["ray_data"] / rate["plain"]
        lines["ray_train_vs_plain_gpu_ratio"] = rate["ray_train"] / rate["plain"]  # goal: 0.95 or more
        lines["plain_vs_ceiling_ratio"] = rate["plain"] / rate["ceiling"]
        print_lines(lines)
    return 0
