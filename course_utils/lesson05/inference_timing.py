"""Lesson 05's side-by-side measurement: one call per image, Ray Data batches, plain PyTorch.

``measure_throughput`` times, side by side, per-image calls to the model actor, Ray Data batch
inference and a plain PyTorch loop on the driver (same model, batch size and cores, no Ray), with
the lesson's own definitions; ``Throughput`` holds what it measured and says it as a table.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from course_utils.core.batch_format import to_model_input
from course_utils.core.checkpoints import load_model
from course_utils.core.device import get_device
from course_utils.core.progress import progress_bar
from course_utils.lesson05.inference import (
    PoolPlan,
    collect_predictions,
    images_dataset,
    pool_for,
)


def predict_one_by_one(worker: Any, images: np.ndarray, progress: bool = True) -> np.ndarray:
    """One ``ray.get(worker.predict.remote(x))`` per digit: the simplest way to serve a model with an actor."""
    import ray

    predictions = []
    for x in progress_bar(images, desc="one call per image", disable=not progress):
        predictions.append(ray.get(worker.predict.remote(x))[0])
    return np.asarray(predictions, dtype=np.int64)


def plain_pytorch_predict(
    checkpoint: Any, images: np.ndarray, *, batch_size: int = 256, threads: int | None = None
) -> np.ndarray:
    """Plain PyTorch on the driver, no Ray: load, then one ``model(batch)`` per ``batch_size`` digits,
    with the model ``BatchPredictor`` builds (lesson 01's, the checkpoint's weights) and ``threads`` torch
    threads (default: every core)."""

    before = torch.get_num_threads()
    torch.set_num_threads(threads or os.cpu_count() or 1)
    try:
        device = get_device()
        model, predictions = load_model(checkpoint, map_location=device), []
        with torch.inference_mode():
            for start in range(0, len(images), batch_size):
                x = to_model_input(images[start : start + batch_size]).to(device)
                predictions.append(model(x).argmax(dim=1).cpu())
        return torch.cat(predictions).numpy()
    finally:
        torch.set_num_threads(before)


def wait_until_quiet(busy_pct: float = 25.0, timeout_s: float = 10.0) -> float:
    """Wait until this machine's CPUs are mostly idle (two 0.5 s samples under ``busy_pct``), at
    most ``timeout_s``; the seconds waited. Ray Data's teardown goes on for seconds after the last
    prediction, and slowed a plain PyTorch pass started at once by ~12 % here."""
    import psutil

    start, quiet = time.perf_counter(), 0
    while quiet < 2 and time.perf_counter() - start < timeout_s:
        quiet = quiet + 1 if psutil.cpu_percent(interval=0.5) < busy_pct else 0
    return time.perf_counter() - start


@dataclass(frozen=True)
class BatchTiming:
    """One whole Ray Data batch-inference pipeline, timed from building the Dataset to the last
    prediction on the driver."""

    images: int
    seconds: float
    startup_seconds: float  # until the first predictions reached the driver (pool started, model loaded)
    steady_rate: float  # images/s after the first predictions
    started_at: float = 0.0  # time.time() when the pipeline was built: to line up with Ray's task events
    pool: PoolPlan | None = None  # the pool that ran it (sized to the cluster when it started)
    first_batch_rows: int = 0  # the rows of the first predictions, counted in start-up, not the steady rate

    @property
    def rate(self) -> float:
        return self.images / self.seconds

    def lines(self, name: str = "batch") -> list[str]:
        """``<name>_images: N``-style lines: images, seconds, start-up, steady and overall images/s."""
        return [
            f"{name}_images: {self.images}",
            f"{name}_seconds: {self.seconds:.2f}",
            f"{name}_startup_seconds: {self.startup_seconds:.2f}",
            f"{name}_steady_images_per_s: {self.steady_rate:.1f}",
            f"{name}_images_per_s: {self.rate:.1f}",
        ]


def time_batch_inference(
    checkpoint: Any,
    images: np.ndarray,
    predictor: type,
    pipeline: Callable[..., Any],
    *,
    pool_size: int = 2,
    batch_size: int = 256,
    cpus_per_actor: int = 1,
) -> BatchTiming:
    """Time ``pipeline`` (lesson 05's ``batch_predict``) with ``predictor`` over ``images`` end to
    end, pool start-up and model loading included. Four model batches per block: the first
    predictions come early and the driver's per-block work stays small (one was slower here)."""
    labels = np.zeros(len(images), dtype=np.int64)
    started_at, start = time.time(), time.perf_counter()
    pool = pool_for(pool_size, cpus_per_actor)
    ds = images_dataset(images, labels, blocks=max(pool.size * 4, len(images) // (batch_size * 4)))
    timings: dict[str, float] = {}
    _, predictions = collect_predictions(
        pipeline(
            ds, checkpoint, predictor, pool_size=pool.size, batch_size=batch_size, **pool.actor_options()
        ),
        timings,
    )
    seconds = time.perf_counter() - start
    if len(predictions) != len(images):
        raise RuntimeError(
            f"Batch inference returned {len(predictions)} predictions for {len(images)} digits."
        )
    startup = timings["first_batch_at"] - start
    steady = (len(images) - timings["first_batch_rows"]) / max(seconds - startup, 1e-9)
    return BatchTiming(
        len(images), seconds, startup, steady, started_at, pool, int(timings["first_batch_rows"])
    )


@dataclass(frozen=True)
class Throughput:
    """Images per second of per-image remote calls vs batch inference (vs plain PyTorch), one run."""

    per_image_images: int
    per_image_seconds: float
    batch: BatchTiming
    plain_images: int = 0  # plain PyTorch model(batch) loop on the driver, same digits (0: not run)
    plain_seconds: float = float("nan")
    plain_threads: int = 0

    @property
    def per_image_rate(self) -> float:
        return self.per_image_images / self.per_image_seconds

    @property
    def batch_rate(self) -> float:
        return self.batch.rate

    @property
    def ratio(self) -> float:
        return self.batch_rate / self.per_image_rate

    @property
    def plain_rate(self) -> float:
        return self.plain_images / self.plain_seconds if self.plain_images else float("nan")

    @property
    def plain_ratio(self) -> float:
        """Ray Data batch images/s over plain PyTorch's on the same cores (1.0: no overhead at all)."""
        return self.batch_rate / self.plain_rate

    def table(self):
        """One row per way of predicting (images, seconds, images/s), for a reader: what ``lines``
        holds, start-up and the steady rate after it as rows of their own."""
        import pandas as pd

        batch, pool = self.batch, self.batch.pool
        steady_images = batch.images - batch.first_batch_rows
        rows = {}
        if self.plain_images:
            rows[f"plain PyTorch, no Ray ({self.plain_threads} threads)"] = (
                self.plain_images,
                self.plain_seconds,
            )
        rows["one remote call per image"] = (self.per_image_images, self.per_image_seconds)
        rows[f"batch inference ({pool.size if pool else '?'}-actor pool)"] = (batch.images, batch.seconds)
        rows["  of which start-up, to the first predictions"] = (
            batch.first_batch_rows,
            batch.startup_seconds,
        )
        rows["  of which after start-up"] = (steady_images, batch.seconds - batch.startup_seconds)
        frame = pd.DataFrame.from_dict(rows, orient="index", columns=["images", "seconds"])
        frame["images/s"] = frame["images"] / frame["seconds"]
        return frame

    def lines(self) -> list[str]:
        """``name: value`` lines, ending with the batch-vs-plain (when measured) and batch-vs-per-image ratios."""
        plain = []
        if self.plain_images:
            plain = [
                f"plain_torch_threads: {self.plain_threads}",
                f"plain_torch_images: {self.plain_images}",
                f"plain_torch_seconds: {self.plain_seconds:.2f}",
                f"plain_torch_images_per_s: {self.plain_rate:.1f}",
            ]
        last = [f"batch_vs_plain_torch_ratio: {self.plain_ratio:.2f}"] if self.plain_images else []
        return plain + [
            f"per_image_images: {self.per_image_images}",
            f"per_image_seconds: {self.per_image_seconds:.2f}",
            f"per_image_images_per_s: {self.per_image_rate:.1f}",
            *self.batch.lines("batch"),
            *last,
            f"batch_vs_per_image_ratio: {self.ratio:.1f}",
        ]


def measure_throughput(
    checkpoint: Any,
    images: np.ndarray,
    predictor: type,
    pipeline: Callable[..., Any],
    start_worker: Callable[[Any], Any],
    *,
    per_image: int = 300,
    batch_copies: int = 1,
    pool_size: int = 2,
    batch_size: int = 256,
    cpus_per_actor: int = 1,
    worker: Any = None,
    progress: bool = True,
    plain: bool = True,
) -> Throughput:
    """Time the ways side by side on the same digits and checkpoint, with lesson 05's ``predictor``
    (``BatchPredictor``), ``pipeline`` (``batch_predict``) and ``start_worker``
    (``start_model_worker``), so a learner's edits to those cells are what is measured.

    Per-image: ``per_image`` sequential calls on a warmed-up ``ModelWorker`` (its start-up not
    counted). Batch: ``time_batch_inference`` over ``images`` repeated ``batch_copies`` times. Plain:
    ``plain_pytorch_predict`` on the same digits, model loading included.
    """
    import ray

    many = np.concatenate([images] * batch_copies) if batch_copies > 1 else images
    plain_seconds, threads = float("nan"), os.cpu_count() or 1
    if plain:
        wait_until_quiet()
        start = time.perf_counter()
        plain_pytorch_predict(checkpoint, many, batch_size=batch_size, threads=threads)
        plain_seconds = time.perf_counter() - start

    # Batch before the per-image actor starts: batch start-up is counted and the actor's is not,
    # so that actor must not hold a CPU slot or one of Ray's prestarted worker processes meanwhile.
    wait_until_quiet()
    batch = time_batch_inference(
        checkpoint,
        many,
        predictor,
        pipeline,
        pool_size=pool_size,
        batch_size=batch_size,
        cpus_per_actor=cpus_per_actor,
    )

    own_worker = worker is None
    if own_worker:
        worker = start_worker(checkpoint)
    try:
        ray.get(worker.predict.remote(images[:1]))  # loaded and warm before the clock starts
        wait_until_quiet()
        sample = images[: min(per_image, len(images))]
        start = time.perf_counter()
        predict_one_by_one(worker, sample, progress=progress)
        per_image_seconds = time.perf_counter() - start
    finally:
        if own_worker:
            ray.kill(worker, no_restart=True)

    return Throughput(
        len(sample),
        per_image_seconds,
        batch,
        plain_images=len(many) if plain else 0,
        plain_seconds=plain_seconds,
        plain_threads=threads if plain else 0,
    )
