"""The batch predictor lesson 05 teaches, exported from the lessons' ``#@save`` cells.

GENERATED: do not edit. Edit the cell in the lesson named above each definition,
then run ``./build.sh export`` (``course_utils.export``); ``tests/unit/test_export.py``
fails while the two differ. Lines stay within 88 characters, as in the lessons.
"""

from __future__ import annotations

import numpy as np
import torch

from course_utils.device import get_device
from course_utils.inference import load_torchscript
from course_utils.pixels import to_model_input


# From 05_inference.ipynb, cell 15:
# '# 07. The class each pool actor runs'.
class BatchPredictor:
    """A ``map_batches`` class: each pool actor loads the model once, scores batches."""

    def __init__(self, model: bytes) -> None:
        self.device = get_device()  # this actor's GPU share, or the CPU
        # the TorchScript bytes traced once on the driver
        self.model = load_torchscript(model, self.device)

    @torch.inference_mode()
    def __call__(self, batch: dict) -> dict:
        """``{"image": uint8 [B, 28, 28], "label": ...}`` in; predictions out."""
        logits = self.model(to_model_input(batch["image"]).to(self.device))
        out = {"prediction": logits.argmax(dim=1).cpu().numpy()}
        if "label" in batch:
            # passed through: the images are not sent back
            out["label"] = np.asarray(batch["label"])
        return out
