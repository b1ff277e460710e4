"""Predictions from a training checkpoint: the plumbing around lesson 05's model actor and pool.

Lesson 05 writes the two ways to serve a checkpoint in its ``#@save`` cells
(``course_utils.lesson_inference``): ``ModelWorker``, an actor answering one ``predict`` call per
image, and ``BatchPredictor``/``batch_predict``, ``Dataset.map_batches`` on a pool of actors. This
module holds what they stand on: an actor's resources and course name, the pool sized to the free
slots (``pool_for``), the Dataset of digits and the predictions pulled back (timing them: ``inference_timing``).

Actors ask for one CPU, and for a GPU only when the cluster has one. Their names start with
``ACTOR_PREFIX`` and they live in the learner's Ray namespace (``course-<learner>``), so lesson 06
finds and removes what this learner left running, and only that.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from course_utils.core import progress
from course_utils.core.checkpoints import training_state, write_checkpoint_dir
from course_utils.core.config import ACTOR_PREFIX, get_profile
from course_utils.core.model import build_resnet18
from course_utils.core.session import ResourceError
from course_utils.core.storage import LESSON02_RUN, Storage
from course_utils.core.training import make_trainer

NUM_CLASSES = 10


def gpu_share(pool_size: int, gpus: float) -> float:
    """The GPU each of ``pool_size`` model actors asks for on a cluster with ``gpus`` GPUs: a whole
    one when there are enough, else an equal share (1 GPU, 2 actors: 0.5 each); 0 without GPUs.
    One model and one batch use a small part of a GPU, so actors can share one (fractional ``num_gpus``).
    """
    if gpus <= 0:
        return 0.0
    if pool_size < 1:
        raise ValueError(f"A pool needs at least 1 actor, got {pool_size}.")
    return min(1.0, 1.0 / math.ceil(pool_size / gpus))


@dataclass(frozen=True)
class PoolPlan:
    """A batch-inference pool sized to the cluster: how many model actors, and what each asks Ray for."""

    size: int  # actors to start now (0: not even one fits now, wait in line)
    wanted: int  # actors asked for
    num_cpus: float
    num_gpus: float = 0.0
    why: str = ""
    free: dict[str, float] = field(default_factory=dict)  # what the cluster had free when it was sized

    def need(self) -> dict[str, float]:
        """What one actor needs free, in Ray's resource names (``{"CPU": 1, "GPU": 0.5}``)."""
        return {name: amount for name, amount in (("CPU", self.num_cpus), ("GPU", self.num_gpus)) if amount}

    def actor_options(self) -> dict[str, float]:
        """``num_cpus``/``num_gpus`` for ``map_batches`` (each actor of the pool).

        With a GPU share and 1 CPU, ``num_cpus`` is left out: Ray Data reserves 1 CPU for a GPU map
        itself, and warns that naming both is "experimental". ``num_cpus`` sets the actor's
        ``OMP_NUM_THREADS``, so torch's threads. (The pool is ``ActorPoolStrategy(size=...)``: Ray's
        spelling since 2.51, ``concurrency=`` is deprecated.)
        """
        if not self.num_gpus:
            return {"num_cpus": self.num_cpus}
        return {"num_gpus": self.num_gpus, **({"num_cpus": self.num_cpus} if self.num_cpus != 1 else {})}

    def describe(self) -> str:
        each = f"{self.num_cpus:g} CPU" + (f" + {self.num_gpus:g} GPU" if self.num_gpus else "")
        free = ", ".join(f"{self.free.get(k, 0.0):g} {k}" for k in self.need()) if self.free else ""
        return f"pool of {self.size} model actor(s), each {each}: {self.why}" + (
            f" ({free} free)" if free else ""
        )


def plan_pool(
    pool_size: int = 2,
    cpus_per_actor: float = 1,
    *,
    total: dict[str, float] | None = None,
    free: dict[str, float] | None = None,
    nodes: list[dict[str, float]] | None = None,
) -> PoolPlan:
    """How big a batch-inference pool can be on the running cluster now, and each actor's resources.

    Each actor takes ``cpus_per_actor`` CPUs and, with GPUs, ``gpu_share`` of one. The pool gets at
    most as many actors as fit now: a pool whose actors cannot all start may never finish, and
    actors waiting for a neighbour's slots would wait silently (``size == 0``: ``pool_for`` waits in
    line). ``session.ResourceError``, with the numbers, when one actor could never fit on any node.
    ``total``/``free``/``nodes`` default to the running cluster's.
    """
    import ray

    total = ray.cluster_resources() if total is None else total
    free = ray.available_resources() if free is None else free
    if nodes is None:
        nodes = [n["Resources"] for n in ray.nodes() if n.get("Alive")]
    gpus = total.get("GPU", 0.0)
    share = gpu_share(pool_size, gpus)
    one = {name: amount for name, amount in (("CPU", cpus_per_actor), ("GPU", share)) if amount}
    if not any(all(node.get(k, 0.0) + 1e-9 >= v for k, v in one.items()) for node in nodes):
        largest = max(nodes, key=lambda n: (n.get("GPU", 0.0), n.get("CPU", 0.0)), default={})
        asked = " + ".join(f"{v:g} {k}" for k, v in one.items())
        has = " + ".join(f"{largest.get(k, 0.0):g} {k}" for k in one)
        raise ResourceError(
            f"One model actor of the pool needs {asked}, but the largest node of this cluster has {has}: "
            f"it could never start. Ask for at most {largest.get('CPU', 0.0):g} CPU per actor."
        )
    fits_now = min(int((free.get(k, 0.0) + 1e-9) // v) for k, v in one.items())
    size = max(0, min(pool_size, fits_now))
    gpu_part = "no GPU on this cluster"
    if share:
        gpu_part = f"{gpus:g} GPU(s) shared by {pool_size} actors" if share < 1 else "one GPU per actor"
    if size == pool_size:
        why = f"{size} as asked; {gpu_part}"
    elif size:
        why = (
            f"{size} instead of {pool_size}: only {size} actor(s) fit in the slots free now "
            f"(other runs hold the rest); {gpu_part}"
        )
    else:
        why = f"none fits in the slots free now (other runs hold them); {gpu_part}"
    free_now = {k: round(free.get(k, 0.0), 4) for k in ("CPU", "GPU") if k in one}
    return PoolPlan(size, pool_size, float(cpus_per_actor), share, why, free_now)


def pool_for(pool_size: int = 2, cpus_per_actor: float = 1, *, poll_s: float = 1.0) -> PoolPlan:
    """``plan_pool`` on the running cluster, waiting in line (one line, ``progress.wait_for_free``) while not
    even one actor fits. It holds nothing while it waits."""

    plan = plan_pool(pool_size, cpus_per_actor)
    if plan.size == 0:
        progress.wait_for_free(plan.need(), "this pool", poll_s)
        again = plan_pool(pool_size, cpus_per_actor)
        # Another learner may take the slot first; Ray then queues our one actor until a slot frees.
        plan = again if again.size else replace(again, size=1, why="1 after waiting in line")
    return plan


def where_it_runs(info: dict[str, Any]) -> str:
    """One sentence from ``ModelWorker.info()``: the device torch uses, and why when it is not the GPU Ray
    reserved (a cluster that declares GPUs this machine does not have, as the GPU-shaped tests do)."""
    gpus = info.get("ray_gpu_ids") or []
    where = f"the actor (pid {info['pid']}) runs its model on {info['device']}"
    if gpus and info["device"] == "cpu":
        return (
            f"{where}: Ray reserved GPU {', '.join(gpus)} for it, but torch sees no GPU in its process, so the "
            "cluster declares a GPU this machine does not have (what `ray start --num-gpus` does), and the "
            "model runs on the CPU"
        )
    return where + (f" (Ray reserved GPU {', '.join(gpus)} for it)" if gpus else "")


def actor_name(kind: str, name: str | None = None) -> str:
    """A course actor's name: ``name`` or ``course-<kind>-<pid>-<ns>``, always starting with
    ``ACTOR_PREFIX``, which is how lesson 06 finds the course's actors (and never another's)."""
    name = name or f"{ACTOR_PREFIX}{kind}-{os.getpid()}-{time.monotonic_ns()}"
    if not name.startswith(ACTOR_PREFIX):
        raise ValueError(f"Course actor names start with {ACTOR_PREFIX!r}, got {name!r}.")
    return name


def images_dataset(images: np.ndarray, labels: np.ndarray | None = None, blocks: int = 4):
    """A Ray Dataset with an ``image`` tensor column (and ``label``) in ``blocks`` blocks, so every
    actor of a pool gets work (one block goes to one actor at a time)."""
    import pyarrow as pa
    import ray.data
    from ray.data.extensions import ArrowTensorArray

    images = np.ascontiguousarray(images)
    labels = None if labels is None else np.asarray(labels, dtype=np.int64)
    tables = []
    for idx in np.array_split(np.arange(len(images)), max(1, min(blocks or 1, len(images)))):
        columns = {"image": ArrowTensorArray.from_numpy(images[idx])}
        if labels is not None:
            columns["label"] = pa.array(labels[idx])
        tables.append(pa.table(columns))
    # from_blocks keeps our blocks and computes their metadata here; from_arrow would start a
    # remote task per table just to read it back (seconds on a busy 2-core machine).
    return ray.data.from_blocks(tables)


def collect_predictions(
    predicted_ds: Any, timings: dict[str, float] | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """(labels, predictions) of a ``batch_predict`` Dataset, pulled to the driver. With ``timings``,
    records ``first_batch_at`` (``time.perf_counter()`` when the first predictions arrived)."""
    labels, predictions = [], []
    for batch in predicted_ds.iter_batches(batch_size=None, batch_format="numpy"):
        if timings is not None and not predictions:
            timings["first_batch_at"] = time.perf_counter()
            timings["first_batch_rows"] = len(batch["prediction"])
        labels.append(batch["label"])
        predictions.append(batch["prediction"])
    if not predictions:
        raise ValueError("The dataset was empty: there is nothing to score.")
    return np.concatenate(labels), np.concatenate(predictions)


def accuracy(labels: np.ndarray, predictions: np.ndarray) -> float:
    """Share of predictions equal to the labels."""
    labels, predictions = np.asarray(labels), np.asarray(predictions)
    if labels.shape != predictions.shape or labels.size == 0:
        raise ValueError(
            f"Need equal, non-empty label and prediction arrays: {labels.shape} vs {predictions.shape}."
        )
    return float((labels == predictions).mean())


def confusion_counts(
    labels: np.ndarray, predictions: np.ndarray, num_classes: int = NUM_CLASSES
) -> np.ndarray:
    """Counts [true class, predicted class]."""
    labels, predictions = np.asarray(labels, dtype=np.int64), np.asarray(predictions, dtype=np.int64)
    accuracy(labels, predictions)  # same shape checks
    if labels.min() < 0 or predictions.min() < 0 or max(labels.max(), predictions.max()) >= num_classes:
        raise ValueError(f"Classes must lie in 0..{num_classes - 1}.")
    matrix = np.zeros((num_classes, num_classes), dtype=np.int64)
    np.add.at(matrix, (labels, predictions), 1)
    return matrix


def train_if_missing(store: Storage, run_name: str, train_loop: Callable) -> None:
    """Make sure ``store`` holds run ``run_name`` (lesson 02's) with a kept checkpoint.

    When it is missing or holds none (lesson 05 run on its own), fits ``train_loop`` (lesson 02's loop)
    now through ``course_utils.core.training.make_trainer`` and says so; otherwise says where it found it.
    """

    if store.run_exists(run_name):
        try:
            result = store.result(run_name)  # ray.train.Result.from_path, any COURSE_STORAGE
            if result.best_checkpoints:
                print(
                    f"Found run {run_name!r} in storage, with {len(result.best_checkpoints)} kept checkpoint(s)."
                )
                return
        except RuntimeError as exc:  # the folder exists but the run never registered a checkpoint
            print(f"Run {run_name!r} cannot be read back ({exc}).")
    profile = get_profile()
    print(
        f"No checkpoint of run {run_name!r} in storage yet (lesson 02 has not run here), so training it "
        f"now with course_utils.core.training.make_trainer: {profile.epochs} epochs on {profile.train_size:,} "
        f"digits, {profile.num_workers} worker(s) (the {profile.name} profile)...",
        flush=True,
    )
    started = time.perf_counter()
    make_trainer(run_name, profile, store=store, train_loop=train_loop).fit()
    print(f"Trained run {run_name!r} in {time.perf_counter() - started:.0f} s.")


def placeholder_checkpoint(store: Storage, directory: str | Path | None = None) -> Path:
    """A checkpoint dir holding an untrained ResNet-18, for speed tests; by default in ``store``'s
    local outputs (``Storage.local_output_dir``), where lesson 06 removes it."""

    torch.manual_seed(0)
    directory = directory or store.local_output_dir("untrained-resnet18")
    return write_checkpoint_dir(training_state(build_resnet18(), None, 0, []), directory)


def available_checkpoint(store: Storage, run_name: str | None = None) -> tuple[Any, str]:
    """(checkpoint, description): lesson 02's best in ``store`` when it exists, else an untrained model (speed does
    not depend on the weights, so the benchmark and the cleanup demo never train for one)."""
    import ray.train

    run_name = run_name or LESSON02_RUN
    if store.run_exists(run_name):
        try:
            best = store.result(run_name).get_best_checkpoint("accuracy", "max")
            if best is not None:
                return best, f"best checkpoint of {run_name}"
        except RuntimeError:
            pass
    placeholder = ray.train.Checkpoint.from_directory(str(placeholder_checkpoint(store)))
    return placeholder, "untrained ResNet-18 (speed does not depend on the weights)"
