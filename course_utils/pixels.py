"""MNIST pixels as the model wants them, with nothing heavier than numpy and torch.

Every path that feeds the model (training transform, Ray Data preprocessing, inference actors)
normalises with these two numbers. They live here, not in ``course_utils.data``, so that a Ray
Data inference actor importing ``to_model_input`` does not also import torchvision (≈ 1 s of
start-up per actor on this machine).
"""

from __future__ import annotations

import numpy as np
import torch

MEAN, STD = 0.1307, 0.3081


def to_model_input(images: np.ndarray | torch.Tensor) -> torch.Tensor:
    """Digits as the model wants them: float [N, 1, 28, 28], normalised like the training data.

    Accepts raw uint8 digits ([28, 28], [N, 28, 28] or [N, 1, 28, 28]), normalised the same
    way as ``course_utils.data.TRANSFORM``, or float tensors that are already normalised.
    """
    if not isinstance(images, torch.Tensor):
        images = np.asarray(images)
        # Ray hands actors read-only arrays; torch wants to own writable memory.
        images = torch.from_numpy(images if images.flags.writeable else images.copy())
    x = images
    if not x.dtype.is_floating_point:
        x = (x.float() / 255.0 - MEAN) / STD
    if x.dim() == 2:
        x = x.unsqueeze(0)
    if x.dim() == 3:
        x = x.unsqueeze(1)
    if x.dim() != 4 or tuple(x.shape[1:]) != (1, 28, 28):
        raise ValueError(f"Expected digits shaped [N, 28, 28] or [N, 1, 28, 28], got {tuple(x.shape)}.")
    return x.contiguous()
