"""A batch of course digits: its columns, the check that names what is missing, and the pixels as
the model wants them.

The digits have two columns, ``image`` and ``label``; a dataset or batch without them fails with
``DatasetColumnsError`` naming the columns it has, before a fit waits on it. Every path that feeds
the model normalises with ``MEAN`` and ``STD``. Only numpy and torch are imported, so an inference
actor importing ``to_model_input`` skips torchvision (about 1 s of start-up per actor on 2 cores).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

IMAGE, LABEL = "image", "label"
REQUIRED_COLUMNS = (IMAGE, LABEL)


class DatasetColumnsError(ValueError):
    """A dataset lacks the columns the course's transform or training loop needs."""


def check_columns(schema: Any, required: Sequence[str] = REQUIRED_COLUMNS, what: str = "dataset") -> None:
    """Raise ``DatasetColumnsError`` naming the columns ``schema`` (a Ray or Arrow schema, or a dict
    batch) lacks."""
    names = list(schema) if isinstance(schema, dict) else list(getattr(schema, "names", None) or [])
    missing = [c for c in required if c not in names]
    if missing:
        raise DatasetColumnsError(
            f"The {what} has columns {names} but the course needs {list(required)}: missing {missing}. "
            f"Write it with course_utils.lesson03.raydata.write_parquet (columns {IMAGE!r}: 784 uint8 bytes, "
            f"{LABEL!r}: int64) or rename your columns with ds.rename_columns(...)."
        )


MEAN, STD = 0.1307, 0.3081


def to_model_input(images: np.ndarray | torch.Tensor) -> torch.Tensor:
    """Digits as the model wants them: float [N, 1, 28, 28], normalised like the training data.

    Accepts raw uint8 digits ([28, 28], [N, 28, 28] or [N, 1, 28, 28]), normalised the same
    way as ``course_utils.core.data.TRANSFORM``, or float tensors that are already normalised.
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
