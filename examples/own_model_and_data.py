"""Your own model and data in lesson 02's Ray Train loop: a small MLP on scikit-learn's 8x8 digits.

Run it from the repository root (docs/going-further.md, "Your own model and data"):

    .venv/bin/python examples/own_model_and_data.py

It needs no download: scikit-learn ships its 1,797 digits in its wheel. The two functions to swap for
your own are ``make_dataset`` and ``make_model``; ``train_loop_per_worker`` is lesson 02's loop with
those two calls where the course's MNIST and ResNet-18 were. Runs go to the course storage
(``COURSE_STORAGE``) under ``own-model-and-data``.
"""

from __future__ import annotations

import tempfile

import ray.train
import ray.train.torch
import torch
from ray.train import CheckpointConfig, RunConfig, ScalingConfig
from ray.train.torch import TorchTrainer
from torch import nn
from torch.utils.data import DataLoader, TensorDataset, random_split

from course_utils.core import session

RUN_NAME = "own-model-and-data"


def make_dataset() -> tuple[TensorDataset, TensorDataset]:
    """Your data: any map-style ``Dataset`` works. Here 1,797 8x8 digits, split 80/20 with a fixed seed
    (every worker must build the same split)."""
    from sklearn.datasets import load_digits

    images, labels = load_digits(return_X_y=True)
    full = TensorDataset(torch.tensor(images / 16.0, dtype=torch.float32), torch.tensor(labels))
    train, test = random_split(full, [0.8, 0.2], generator=torch.Generator().manual_seed(0))
    return train, test


def make_model() -> nn.Module:
    """Your model: any ``nn.Module``. Here a two-layer perceptron over the 64 pixels."""
    return nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))


def train_loop_per_worker(config: dict) -> None:
    """Lesson 02's loop, with ``make_dataset`` and ``make_model`` in place of MNIST and ResNet-18."""
    context = ray.train.get_context()
    world = context.get_world_size()
    train_ds, test_ds = make_dataset()
    model = ray.train.torch.prepare_model(make_model())  # DDP when world > 1
    loader = ray.train.torch.prepare_data_loader(
        DataLoader(train_ds, batch_size=config["batch_size"] // world, shuffle=True)
    )
    test_loader = ray.train.torch.prepare_data_loader(DataLoader(test_ds, batch_size=256))
    optimizer = torch.optim.Adam(model.parameters(), lr=config["lr"])
    loss_fn = nn.CrossEntropyLoss()
    for epoch in range(config["epochs"]):
        if world > 1:
            loader.sampler.set_epoch(epoch)  # a new shuffle every epoch
        model.train()
        for images, labels in loader:
            optimizer.zero_grad()
            loss = loss_fn(model(images), labels)
            loss.backward()
            optimizer.step()
        model.eval()
        correct = total = 0
        with torch.no_grad():
            for images, labels in test_loader:
                correct += (model(images).argmax(1) == labels).sum().item()
                total += len(labels)
        # each rank scored its shard of the test set: add them up across the workers
        counts = torch.tensor([correct, total], dtype=torch.float64)
        if world > 1:
            torch.distributed.all_reduce(counts)
        metrics = {"epoch": epoch, "loss": loss.item(), "accuracy": (counts[0] / counts[1]).item()}
        with tempfile.TemporaryDirectory() as folder:
            checkpoint = None
            if context.get_world_rank() == 0:  # one copy of the weights, from rank 0
                module = model.module if hasattr(model, "module") else model
                torch.save(module.state_dict(), f"{folder}/model.pt")
                checkpoint = ray.train.Checkpoint.from_directory(folder)
            ray.train.report(metrics, checkpoint=checkpoint)


def main() -> None:
    store = session.start_ray().storage  # COURSE_STORAGE, read once
    store.reset_run(RUN_NAME)  # an earlier run of this example: start fresh, not resumed
    storage_path, storage_filesystem = store.for_ray()
    trainer = TorchTrainer(
        train_loop_per_worker,
        train_loop_config={"batch_size": 64, "lr": 1e-3, "epochs": 10},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(
            name=RUN_NAME,
            storage_path=storage_path,
            storage_filesystem=storage_filesystem,
            checkpoint_config=CheckpointConfig(num_to_keep=1),
        ),
    )
    result = trainer.fit()
    print(f"{RUN_NAME}: accuracy {result.metrics['accuracy']:.3f} after {result.metrics['epoch'] + 1} epochs")


if __name__ == "__main__":
    main()
