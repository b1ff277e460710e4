"""Lesson 05's model actor and batch pipeline, from the lessons' ``#@save`` cells.

GENERATED: do not edit. Edit the cell in the lesson named above each definition,
then run ``./build.sh export`` (``maintainer_tools.export``);
``tests/unit/test_export.py`` fails while the two differ. Lines stay within 88
characters, as in the lessons.
"""

from __future__ import annotations

import os
import time

import numpy as np
import ray
import ray.data
import torch
import torchvision


# From 05_inference.ipynb, cell 9:
# '# 04. A Ray actor that serves predictions'.
class ModelWorker:
    """A model kept by a Ray actor: loaded once, then one ``predict`` per call."""

    def __init__(self, checkpoint) -> None:
        start = time.perf_counter()
        # the GPU Ray gave this actor, or the CPU
        gpus = ray.get_gpu_ids() if ray.is_initialized() else []
        accelerator = torch.accelerator.current_accelerator(check_available=True)
        self.device = accelerator if gpus and accelerator else torch.device("cpu")
        with checkpoint.as_directory() as directory:
            path = os.path.join(directory, "state.pt")
            state = torch.load(path, map_location=self.device, weights_only=True)
        self.model = torchvision.models.resnet18(num_classes=10)
        self.model.conv1 = torch.nn.Conv2d(
            1, 64, kernel_size=7, stride=2, padding=3, bias=False
        )
        self.model.load_state_dict(state["model"])
        self.model.to(self.device).eval()
        self.load_seconds = time.perf_counter() - start
        self.calls = 0

    @torch.inference_mode()
    def predict(self, images) -> np.ndarray:
        """The predicted class of each digit (one [28, 28] digit: one class)."""
        self.calls += 1
        # uint8 digits -> float [N, 1, 28, 28], normalised as the training digits were
        pixels = torch.tensor(np.asarray(images), dtype=torch.float32)
        pixels = (pixels.reshape(-1, 1, 28, 28) / 255.0 - 0.1307) / 0.3081
        logits = self.model(pixels.to(self.device))
        return logits.argmax(dim=1).cpu().numpy()

    def info(self) -> dict:
        """Where this actor runs and what it has done."""
        gpu_ids = ray.get_gpu_ids() if ray.is_initialized() else []
        return {
            "pid": os.getpid(),
            "device": str(self.device),
            "ray_gpu_ids": [str(i) for i in gpu_ids],
            "load_seconds": round(self.load_seconds, 3),
            "predict_calls": self.calls,
        }


def start_model_worker(checkpoint, num_gpus: float = 0, name: str | None = None):
    """Start ``ModelWorker`` as a Ray actor with 1 CPU and ``num_gpus`` GPUs."""
    actor_class = ray.remote(ModelWorker).options(
        num_cpus=1, num_gpus=num_gpus, name=name
    )
    return actor_class.remote(checkpoint)  # at once: the actor loads in its process


# From 05_inference.ipynb, cell 16:
# '# 07. The class each pool actor runs, and the pipeline that runs it'.
class BatchPredictor:
    """A ``map_batches`` class: each pool actor loads the model once, scores batches."""

    def __init__(self, checkpoint) -> None:
        # this actor's GPU share, or the CPU (outside Ray: the CPU)
        gpus = ray.get_gpu_ids() if ray.is_initialized() else []
        accelerator = torch.accelerator.current_accelerator(check_available=True)
        self.device = accelerator if gpus and accelerator else torch.device("cpu")
        with checkpoint.as_directory() as directory:
            path = os.path.join(directory, "state.pt")
            state = torch.load(path, map_location=self.device, weights_only=True)
        self.model = torchvision.models.resnet18(num_classes=10)
        self.model.conv1 = torch.nn.Conv2d(
            1, 64, kernel_size=7, stride=2, padding=3, bias=False
        )
        self.model.load_state_dict(state["model"])
        self.model.to(self.device).eval()

    @torch.inference_mode()
    def __call__(self, batch: dict) -> dict:
        """``{"image": uint8 [B, 28, 28], "label": ...}`` in; predictions out."""
        pixels = torch.tensor(batch["image"], dtype=torch.float32)
        pixels = (pixels.reshape(-1, 1, 28, 28) / 255.0 - 0.1307) / 0.3081
        logits = self.model(pixels.to(self.device))
        out = {"prediction": logits.argmax(dim=1).cpu().numpy()}
        if "label" in batch:
            # passed through: the images are not sent back
            out["label"] = np.asarray(batch["label"])
        return out


def batch_predict(ds, checkpoint, predictor, *, pool_size: int, batch_size=256, **each):
    """Every row of ``ds`` scored by ``pool_size`` actors running ``predictor`` (lazy);
    ``each``: what each actor asks for (``num_cpus``, ``num_gpus``)."""
    return ds.map_batches(
        predictor,
        # each actor builds predictor(checkpoint=...) once
        fn_constructor_kwargs={"checkpoint": checkpoint},
        compute=ray.data.ActorPoolStrategy(size=pool_size),
        batch_size=batch_size,
        batch_format="numpy",
        **each,
    )
