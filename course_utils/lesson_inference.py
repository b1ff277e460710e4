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

from course_utils import checkpoints, config, inference, progress
from course_utils.batch_format import to_model_input
from course_utils.device import get_device
from course_utils.inference import load_torchscript


# From 05_inference.ipynb, cell 9:
# '# 04. A Ray actor that serves predictions'.
class ModelWorker:
    """A model kept by a Ray actor: loaded once, then one ``predict`` per call."""

    def __init__(self, checkpoint) -> None:
        start = time.perf_counter()
        self.device = get_device()  # the GPU Ray gave this actor, or the CPU
        self.model = checkpoints.load_model(checkpoint, map_location=self.device)
        self.load_seconds = time.perf_counter() - start
        self.calls = 0

    @torch.inference_mode()
    def predict(self, images) -> np.ndarray:
        """The predicted class of each digit (one [28, 28] digit: one class)."""
        self.calls += 1
        logits = self.model(to_model_input(images).to(self.device))
        return logits.argmax(dim=1).cpu().numpy()

    def info(self) -> dict:
        """Where this actor runs and what it has done, for the notebook to print."""
        # the GPUs Ray reserved for this actor (none when the class is used without Ray)
        gpu_ids = ray.get_gpu_ids() if ray.is_initialized() else []
        return {
            "pid": os.getpid(),
            "device": str(self.device),
            "ray_gpu_ids": [str(i) for i in gpu_ids],
            "load_seconds": round(self.load_seconds, 3),
            "predict_calls": self.calls,
        }


def start_model_worker(checkpoint, name: str | None = None):
    """Start ``ModelWorker`` as a Ray actor: 1 CPU, a GPU where the cluster has one."""
    num_gpus = 1 if ray.cluster_resources().get("GPU", 0) >= 1 else 0
    # On a busy cluster: wait in line, holding nothing, until those slots are free.
    progress.wait_for_free({"CPU": 1, "GPU": num_gpus}, "this model actor")
    actor_class = ray.remote(ModelWorker).options(
        num_cpus=1,
        num_gpus=num_gpus,
        # a "course-" name in this learner's namespace: how lesson 06 finds it, and
        # never another learner's actor
        name=inference.actor_name("model-worker", name),
        namespace=config.learner_namespace(),
    )
    return actor_class.remote(checkpoint)  # at once: the actor loads in its process


# From 05_inference.ipynb, cell 16:
# '# 07. The class each pool actor runs, and the pipeline that runs it'.
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


def batch_predict(ds, checkpoint, predictor, *, pool, batch_size: int = 256):
    """Every row of ``ds`` scored by a pool of actors running ``predictor`` (lazy)."""
    return ds.map_batches(
        predictor,
        # traced once, here; each actor builds predictor(model=...) from these bytes
        fn_constructor_kwargs={"model": inference.torchscript_bytes(checkpoint)},
        compute=ray.data.ActorPoolStrategy(size=pool.size),
        batch_size=batch_size,
        batch_format="numpy",
        **pool.actor_options(),  # num_cpus (and num_gpus) of each actor
    )
