"""The one place that decides the device: a GPU when PyTorch sees one, the CPU otherwise.

Everything else asks here (or, inside a Ray Train worker, ``ray.train.torch.get_device()``),
so no other module names an accelerator.
"""

from __future__ import annotations

import torch


def gpu_count() -> int:
    """Number of GPUs PyTorch can see in this process (0 on a CPU-only machine)."""
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def has_gpu() -> bool:
    """True when at least one GPU is visible to this process."""
    return gpu_count() > 0


def get_device() -> torch.device:
    """The device a single-process lesson should train on."""
    return torch.device("cuda" if has_gpu() else "cpu")
