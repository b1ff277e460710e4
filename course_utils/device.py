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


def main(argv: list[str] | None = None) -> int:
    """``python -m course_utils.device [--require-gpu]``: say how many GPUs PyTorch sees.

    With ``--require-gpu`` (the GPU workflow's first step) a machine without one fails with a
    single line on stderr that says why, instead of a traceback.
    """
    import argparse
    import os
    import sys

    parser = argparse.ArgumentParser(prog="python -m course_utils.device")
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
    raise SystemExit(main())
