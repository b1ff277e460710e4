"""The columns a course dataset carries, the check that names what is missing, and the batches they make.

Ray Data rows and batches are dicts by column. The course's digits have two columns, ``image``
(784 uint8 bytes, then a normalised float image) and ``label``; a dataset or batch without them
fails with ``DatasetColumnsError`` naming the columns it has, before a fit waits on it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import torch

IMAGE, LABEL = "image", "label"
REQUIRED_COLUMNS = (IMAGE, LABEL)


class DatasetColumnsError(ValueError):
    """A dataset lacks the columns the course's transform or training loop needs."""


def check_columns(schema: Any, required: Sequence[str] = REQUIRED_COLUMNS, what: str = "dataset") -> None:
    """Raise ``DatasetColumnsError`` naming the columns ``schema`` (a Ray or Arrow schema) lacks."""
    names = list(getattr(schema, "names", None) or [])
    missing = [c for c in required if c not in names]
    if missing:
        raise DatasetColumnsError(
            f"The {what} has columns {names} but the course needs {list(required)}: missing {missing}. "
            f"Write it with course_utils.raydata.write_parquet (columns {IMAGE!r}: 784 uint8 bytes, "
            f"{LABEL!r}: int64) or rename your columns with ds.rename_columns(...)."
        )


class _Names:
    """Duck-typed schema (``.names``) for a dict batch, so ``check_columns`` serves both."""

    def __init__(self, batch: dict[str, Any]):
        self.names = list(batch)


def image_label_pairs(
    batches: Iterable[dict[str, torch.Tensor]],
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Ray Data's dict batches ``{"image": ..., "label": ...}`` as the ``(images, labels)`` pairs
    lesson 01's ``train_one_epoch`` takes; a batch without those columns is a clear error."""
    for batch in batches:
        check_columns(_Names(batch), what="training batch")
        yield batch[IMAGE], batch[LABEL]
