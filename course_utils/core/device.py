"""The one place in the package that decides the device: a GPU when PyTorch sees one, the CPU otherwise.

The course's helpers ask here; the loops a lesson teaches ask PyTorch (``torch.accelerator``) or, inside a Ray
Train worker, ``ray.train.torch.get_device()``, as a learner's own project would, so no module names an
accelerator.
"""

from __future__ import annotations

import os
from typing import Any

import torch


def gpu_count() -> int:
    """Number of GPUs PyTorch can see in this process (0 on a CPU-only machine)."""
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def has_gpu() -> bool:
    """True when at least one GPU is visible to this process."""
    return gpu_count() > 0


def loader_options(cpus: int | None = None) -> dict[str, Any]:
    """``DataLoader`` settings for this process: worker processes and pinned memory when a GPU trains.

    A loader decoding every image in the training process leaves a GPU waiting (PyTorch's performance
    guide: worker processes, and page-locked memory so copies overlap). On the CPU the training needs
    every core, so the loader stays in-process (``{}``). ``cpus``: default, the CPUs this process may use.
    """
    if not has_gpu():
        return {}
    if cpus is None:
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    workers = max(1, min(8, cpus // 2))
    return {"num_workers": workers, "pin_memory": True, "persistent_workers": True, "prefetch_factor": 4}


def get_device() -> torch.device:
    """The device a single-process lesson should train on."""
    return torch.device("cuda" if has_gpu() else "cpu")


def gpu_report_cli(argv: list[str] | None = None) -> int:
    """``python -m course_utils.core.device [--require-gpu]``: say how many GPUs PyTorch sees; with
    ``--require-gpu`` (the GPU workflow's first step) none is one line on stderr, not a traceback."""
    import argparse
    import sys

    parser = argparse.ArgumentParser(prog="python -m course_utils.core.device")
    parser.add_argument("--require-gpu", action="store_true", help="exit 1 when no GPU is visible")
    args = parser.parse_args(argv)
    count = gpu_count()
    if count == 0 and args.require_gpu:
        build = torch.version.cuda and f"built for CUDA {torch.version.cuda}" or "a CPU-only build"
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        print(
            f"error: no GPU visible to PyTorch {torch.__version__} ({build}"
            + (f", CUDA_VISIBLE_DEVICES={visible!r}" if visible is not None else "")
            + "): this job needs a runner with a GPU and its driver (check nvidia-smi).",
            file=sys.stderr,
        )
        return 1
    names = ", ".join(torch.cuda.get_device_name(i) for i in range(count))
    print(f"{count} GPU(s) visible to PyTorch" + (f": {names}" if names else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(gpu_report_cli())
