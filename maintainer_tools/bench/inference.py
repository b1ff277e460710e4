"""``python -m maintainer_tools.bench inference``: images/s of one ``ray.get(worker.predict.remote(x))``
per digit vs Ray Data batch inference with an actor pool vs plain PyTorch (lesson 05), through
``inference_timing.measure_throughput``, the lesson's own measurement, with the lesson's own actor and
pipeline (``course_utils.lesson_inference``).

Lesson 05 measures after its section 06 has run a pipeline, so Ray Data's per-cluster service
actors (stats, autoscaling coordinator, locality tracker: detached, started by the first pipeline
on a cluster and kept) are running. The bench does the same, and times that first pipeline too,
on the same digits: ``first_pipeline_*`` lines, and its ratio to plain PyTorch."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

import numpy as np
import ray

from course_utils.core import data, session
from course_utils.core.storage import resolve as resolve_storage
from course_utils.lesson05.inference import available_checkpoint
from course_utils.lesson05.inference_timing import (
    BatchTiming,
    Throughput,
    measure_throughput,
    time_batch_inference,
    wait_until_quiet,
)
from course_utils.lesson_inference import BatchPredictor, batch_predict, start_model_worker


def main(argv: Sequence[str] | None = None) -> Throughput:
    """Per-image remote calls vs batch inference, images/s."""
    parser = argparse.ArgumentParser(
        prog="python -m maintainer_tools.bench inference",
        description="images/s of one ray.get(worker.predict.remote(x)) per digit vs Ray Data batch inference",
    )
    parser.add_argument("--per-image", type=int, default=300, help="digits sent one call at a time")
    parser.add_argument(
        "--copies",
        type=int,
        default=60,
        help="batch side scores the test digits this many times over (60: full-MNIST-sized, 60,000 in smoke)",
    )
    parser.add_argument("--pool-size", type=int, default=2, help="model actors in the Ray Data pool")
    parser.add_argument(
        "--cpus-per-actor", type=int, default=1, help="CPUs (= torch threads) per model actor"
    )
    parser.add_argument(
        "--batch-size", type=int, default=256, help="digits per model(batch) call, Ray and plain"
    )
    parser.add_argument(
        "--parts",
        action="store_true",
        help="also split the batch run's start-up into its parts (needs the dashboard's state API, "
        "which costs some CPU here)",
    )
    args = parser.parse_args(argv)

    data.ensure_mnist(verbose=False)
    if not ray.is_initialized():  # the dashboard costs CPU on a small machine: only when --parts needs it
        session.start_ray(verbose=False, include_dashboard=args.parts)
    checkpoint, described = available_checkpoint(store=resolve_storage())
    images, _ = data.raw_arrays(train=False)
    print(f"checkpoint: {described}")
    # The cluster's first pipeline: it also starts Ray Data's service actors.
    wait_until_quiet()
    first = time_batch_inference(
        checkpoint,
        np.concatenate([images] * args.copies),
        BatchPredictor,
        batch_predict,
        pool_size=args.pool_size,
        batch_size=args.batch_size,
        cpus_per_actor=args.cpus_per_actor,
    )
    result = measure_throughput(
        checkpoint,
        images,
        BatchPredictor,
        batch_predict,
        start_model_worker,
        per_image=args.per_image,
        batch_copies=args.copies,
        pool_size=args.pool_size,
        batch_size=args.batch_size,
        cpus_per_actor=args.cpus_per_actor,
        progress=False,
    )
    print(f"pool_size: {args.pool_size}")
    print(f"cpus_per_actor: {args.cpus_per_actor}")
    print(f"batch_size: {args.batch_size}")
    print("\n".join(first.lines("first_pipeline")))
    print(f"first_pipeline_vs_plain_torch_ratio: {first.rate / result.plain_rate:.2f}")
    if args.parts:
        print("\n".join(startup_parts(checkpoint, result.batch, args.pool_size)))
    print("\n".join(result.lines()), flush=True)
    return result


def startup_parts(checkpoint: Any, batch: BatchTiming, pool_size: int) -> list[str]:
    """What the batch run's start-up (until its first predictions) was made of, from Ray's task
    events (``bench.startup``): the pool's actors asked for, their processes up, their ``__init__`` (model loaded), then the first
    blocks through them and back."""
    from maintainer_tools.bench.startup import created, creation_spans, tasks_since

    job_id = ray.get_runtime_context().get_job_id()
    tasks = tasks_since(job_id, batch.started_at, lambda ts: len(created(ts, "MapWorker")) >= pool_size)
    try:
        asked, running, ready = creation_spans(tasks, "MapWorker")
    except LookupError as error:
        return [f"batch_startup_parts: not available ({error})"]
    first = batch.started_at + batch.startup_seconds
    return [
        f"batch_startup_pool_asked_s: {asked - batch.started_at:.2f}",
        f"batch_startup_pool_processes_up_s: {running - asked:.2f}",
        f"batch_startup_pool_init_s: {ready - running:.2f}",
        f"batch_startup_first_blocks_s: {first - ready:.2f}",
    ]
