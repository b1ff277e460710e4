"""The training loops lessons 01-04 teach, from the lessons' ``#@save`` cells.

GENERATED: do not edit. Edit the cell in the lesson named above each definition,
then run ``./build.sh export`` (``maintainer_tools.export``);
``tests/unit/test_export.py`` fails while the two differ. Lines stay within 88
characters, as in the lessons.
"""

from __future__ import annotations

import csv
import os
import tempfile
import time

import ray.train
import ray.train.torch
import torch
import torch.distributed as dist
import torch.nn.functional as F
import torchvision
from ray.train import CheckpointUploadMode
from torch.utils.data import DataLoader, DistributedSampler, Subset
from torchdata.stateful_dataloader import StatefulDataLoader
from torchvision import datasets, transforms


# From 01_single_gpu_baseline.ipynb, cell 9:
# '# 04. Train on one device'.
def train_baseline(config: dict, out_dir: str) -> list[dict]:
    """Plain PyTorch on one device: train, score held-out digits every epoch, then
    write metrics.csv and model.pt into out_dir. Returns each epoch's metrics."""
    # the GPU when PyTorch sees one, else the CPU
    device = torch.accelerator.current_accelerator(check_available=True)
    device = device or torch.device("cpu")
    torch.manual_seed(config["seed"])

    # MNIST from config["data_root"], a seeded subset of each split (None: all of it)
    to_tensor = transforms.Compose(
        [transforms.ToTensor(), transforms.Normalize((0.1307,), (0.3081,))]
    )
    splits = []
    for train, size in ((True, config["train_size"]), (False, config["test_size"])):
        digits = datasets.MNIST(config["data_root"], train=train, transform=to_tensor)
        seeded = torch.Generator().manual_seed(config["seed"])
        order = torch.randperm(len(digits), generator=seeded)[:size]
        splits.append(Subset(digits, order.tolist()))
    train_ds, test_ds = splits
    loader = DataLoader(train_ds, config["batch_size"], shuffle=True)
    test_loader = DataLoader(test_ds, batch_size=512)

    # section 03's model
    model = torchvision.models.resnet18(num_classes=10)
    model.conv1 = torch.nn.Conv2d(1, 64, kernel_size=7, stride=2, padding=3, bias=False)
    model = model.to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=config["lr"])

    rows = []
    for epoch in range(config["epochs"]):
        start = time.perf_counter()
        model.train()
        loss_sum, images = 0.0, 0
        for inputs, labels in loader:  # one step: forward, loss, backward, update
            inputs, labels = inputs.to(device), labels.to(device)
            loss = F.cross_entropy(model(inputs), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            loss_sum += loss.item() * len(labels)
            images += len(labels)
        seconds = time.perf_counter() - start

        model.eval()  # score the held-out digits
        test_loss, hits = 0.0, 0
        with torch.no_grad():
            for inputs, labels in test_loader:
                inputs, labels = inputs.to(device), labels.to(device)
                logits = model(inputs)
                test_loss += F.cross_entropy(logits, labels, reduction="sum").item()
                hits += (logits.argmax(1) == labels).sum().item()
        accuracy = hits / len(test_ds)
        rows.append(
            {
                "epoch": epoch,
                "train_loss": loss_sum / images,
                "test_loss": test_loss / len(test_ds),
                "accuracy": accuracy,
                "epoch_time_s": seconds,
                "images_per_s": images / seconds,
            }
        )
        print(f"epoch {epoch}: loss {loss_sum / images:.4f}, accuracy {accuracy:.3f}")

    # the metrics, one row per epoch, and the weights
    with open(os.path.join(out_dir, "metrics.csv"), "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    torch.save(model.state_dict(), os.path.join(out_dir, "model.pt"))
    return rows


# From 02_ray_train_migration.ipynb, cell 6:
# '# 02. The function every worker runs'.
def train_loop_per_worker(config: dict) -> None:
    """What each Ray Train worker runs: lesson 01's loop plus the Ray Train calls."""
    # this worker's rank, and the number of workers
    context = ray.train.get_context()
    rank, world = context.get_world_rank(), context.get_world_size()
    device = ray.train.torch.get_device()  # this worker's GPU, or the CPU
    batch = config["batch_size"] // world  # the global batch, split across workers
    torch.manual_seed(config["seed"])  # the same initial weights on every rank

    # lesson 01's data and model
    to_tensor = transforms.Compose(
        [transforms.ToTensor(), transforms.Normalize((0.1307,), (0.3081,))]
    )
    splits = []
    for train, size in ((True, config["train_size"]), (False, config["test_size"])):
        digits = datasets.MNIST(config["data_root"], train=train, transform=to_tensor)
        seeded = torch.Generator().manual_seed(config["seed"])
        order = torch.randperm(len(digits), generator=seeded)[:size]
        splits.append(Subset(digits, order.tolist()))
    train_ds, test_ds = splits
    model = torchvision.models.resnet18(num_classes=10)
    model.conv1 = torch.nn.Conv2d(1, 64, kernel_size=7, stride=2, padding=3, bias=False)

    # Ray Train: to this worker's device, in DDP when world > 1
    model = ray.train.torch.prepare_model(model)
    plain = model.module if world > 1 else model  # the model inside DDP's wrapper
    optimizer = torch.optim.Adam(model.parameters(), lr=config["lr"])
    # Ray Train: a DistributedSampler gives each worker its shard (on a GPU, 4
    # processes decode images meanwhile)
    on_gpu = device.type != "cpu"
    loader = DataLoader(
        train_ds, batch, shuffle=True, num_workers=4 * on_gpu, pin_memory=on_gpu
    )
    loader = ray.train.torch.prepare_data_loader(loader)
    # this rank's share of the test digits
    test_loader = DataLoader(Subset(test_ds, range(rank, len(test_ds), world)), 512)

    history = []
    for epoch in range(config["epochs"]):
        if world > 1:
            loader.sampler.set_epoch(epoch)  # else every epoch shuffles the same way
        start = time.perf_counter()
        model.train()
        sums = torch.zeros(5, dtype=torch.float64, device=device)
        for images, labels in loader:
            loss = F.cross_entropy(model(images), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            sums[0] += loss.detach() * len(labels)
            sums[1] += len(labels)
        train_s = time.perf_counter() - start

        # each rank scores its share with rank 0's BatchNorm statistics (the saved
        # ones); one all-reduce sums the counts
        if world > 1:
            for buffer in plain.buffers():
                dist.broadcast(buffer, src=0)
        plain.eval()
        with torch.no_grad():
            for images, labels in test_loader:
                logits = plain(images.to(device))
                labels = labels.to(device)
                sums[2] += F.cross_entropy(logits, labels, reduction="sum")
                sums[3] += (logits.argmax(1) == labels).sum()
                sums[4] += len(labels)
        eval_s = time.perf_counter() - start - train_s
        if world > 1:
            dist.all_reduce(sums)
        loss_sum, images_sum, test_loss_sum, hits, scored = sums.tolist()
        metrics = {
            "epoch": epoch,
            "train_loss": loss_sum / images_sum,
            "test_loss": test_loss_sum / scored,
            "accuracy": hits / scored,
            "epoch_time_s": train_s,
            "images_per_s": images_sum / train_s,
            "eval_s": eval_s,  # this rank's, for its share
            "world_size": world,
        }
        history.append(metrics)

        # every rank reports (a barrier); rank 0 attaches a checkpoint
        with tempfile.TemporaryDirectory() as directory:
            checkpoint = None
            if rank == 0:
                state = {
                    "model": plain.state_dict(),
                    "optimizer": optimizer.state_dict(),
                    "epoch": epoch,
                    "history": history,
                }
                torch.save(state, os.path.join(directory, "state.pt"))
                checkpoint = ray.train.Checkpoint.from_directory(directory)
            ray.train.report(metrics, checkpoint=checkpoint)
        if rank == 0:
            loss, accuracy = metrics["train_loss"], metrics["accuracy"]
            print(
                f"[rank 0] epoch {epoch}: loss {loss:.4f}, accuracy {accuracy:.3f}",
                flush=True,
            )


# From 03_ray_data_integration.ipynb, cell 11:
# '# 05. The training loop on a dataset shard'.
def train_loop_ray_data(config: dict) -> None:
    """Lesson 02's loop, its training batches streamed from this worker's shard."""
    # this worker's rank, and the number of workers
    context = ray.train.get_context()
    rank, world = context.get_world_rank(), context.get_world_size()
    device = ray.train.torch.get_device()  # this worker's GPU, or the CPU
    batch = config["batch_size"] // world  # the global batch, split across workers
    torch.manual_seed(config["seed"])  # the same initial weights on every rank

    # lesson 02's test digits and model (the training rows come from Ray Data)
    to_tensor = transforms.Compose(
        [transforms.ToTensor(), transforms.Normalize((0.1307,), (0.3081,))]
    )
    digits = datasets.MNIST(config["data_root"], train=False, transform=to_tensor)
    seeded = torch.Generator().manual_seed(config["seed"])
    order = torch.randperm(len(digits), generator=seeded)[: config["test_size"]]
    test_ds = Subset(digits, order.tolist())
    model = torchvision.models.resnet18(num_classes=10)
    model.conv1 = torch.nn.Conv2d(1, 64, kernel_size=7, stride=2, padding=3, bias=False)

    # Ray Train: to this worker's device, in DDP when world > 1
    model = ray.train.torch.prepare_model(model)
    plain = model.module if world > 1 else model  # the model inside DDP's wrapper
    optimizer = torch.optim.Adam(model.parameters(), lr=config["lr"])
    # Ray Train: this worker's part of datasets={"train": ...}, preprocessed by Ray Data
    shard = ray.train.get_dataset_shard("train")
    # this rank's share of the test digits
    test_loader = DataLoader(Subset(test_ds, range(rank, len(test_ds), world)), 512)

    history = []
    for epoch in range(config["epochs"]):
        start = time.perf_counter()
        batches = shard.iter_torch_batches(
            batch_size=batch,
            dtypes={"image": torch.float32, "label": torch.int64},
            device=device,  # batches arrive on this worker's device
            # rows mixed on this worker (no network), in a new order every epoch
            local_shuffle_buffer_size=config["shuffle_buffer"],
            local_shuffle_seed=config["seed"] + epoch,
        )
        model.train()
        sums = torch.zeros(5, dtype=torch.float64, device=device)
        for rows in batches:  # dict batches: one tensor per column
            images, labels = rows["image"], rows["label"]
            loss = F.cross_entropy(model(images), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            sums[0] += loss.detach() * len(labels)
            sums[1] += len(labels)
        train_s = time.perf_counter() - start

        # each rank scores its share with rank 0's BatchNorm statistics (the saved
        # ones); one all-reduce sums the counts
        if world > 1:
            for buffer in plain.buffers():
                dist.broadcast(buffer, src=0)
        plain.eval()
        with torch.no_grad():
            for images, labels in test_loader:
                logits = plain(images.to(device))
                labels = labels.to(device)
                sums[2] += F.cross_entropy(logits, labels, reduction="sum")
                sums[3] += (logits.argmax(1) == labels).sum()
                sums[4] += len(labels)
        eval_s = time.perf_counter() - start - train_s
        rows_seen_rank = int(sums[1])  # this rank's share of the epoch's rows
        if world > 1:
            dist.all_reduce(sums)
        loss_sum, images_sum, test_loss_sum, hits, scored = sums.tolist()
        metrics = {
            "epoch": epoch,
            "train_loss": loss_sum / images_sum,
            "test_loss": test_loss_sum / scored,
            "accuracy": hits / scored,
            "epoch_time_s": train_s,
            "images_per_s": images_sum / train_s,
            "eval_s": eval_s,  # this rank's, for its share
            "world_size": world,
            "rows_seen_rank": rows_seen_rank,
        }
        history.append(metrics)

        # every rank reports (a barrier); rank 0 attaches a checkpoint
        with tempfile.TemporaryDirectory() as directory:
            checkpoint = None
            if rank == 0:
                state = {
                    "model": plain.state_dict(),
                    "optimizer": optimizer.state_dict(),
                    "epoch": epoch,
                    "history": history,
                }
                torch.save(state, os.path.join(directory, "state.pt"))
                checkpoint = ray.train.Checkpoint.from_directory(directory)
            ray.train.report(metrics, checkpoint=checkpoint)
        if rank == 0:
            loss, accuracy = metrics["train_loss"], metrics["accuracy"]
            print(
                f"[rank 0] epoch {epoch}: loss {loss:.4f}, accuracy {accuracy:.3f}",
                flush=True,
            )


# From 04_fault_tolerance.ipynb, cell 7:
# '# 03. Automatic retries: a loop that resumes'.
def train_loop_resumable(config: dict) -> None:
    """Lesson 02's loop, resumable: it goes on after the checkpoint's epoch."""
    # this worker's rank, and the number of workers
    context = ray.train.get_context()
    rank, world = context.get_world_rank(), context.get_world_size()
    device = ray.train.torch.get_device()  # this worker's GPU, or the CPU
    batch = config["batch_size"] // world  # the global batch, split across workers
    torch.manual_seed(config["seed"])  # the same initial weights on every rank

    # lesson 01's data and model
    to_tensor = transforms.Compose(
        [transforms.ToTensor(), transforms.Normalize((0.1307,), (0.3081,))]
    )
    splits = []
    for train, size in ((True, config["train_size"]), (False, config["test_size"])):
        digits = datasets.MNIST(config["data_root"], train=train, transform=to_tensor)
        seeded = torch.Generator().manual_seed(config["seed"])
        order = torch.randperm(len(digits), generator=seeded)[:size]
        splits.append(Subset(digits, order.tolist()))
    train_ds, test_ds = splits
    model = torchvision.models.resnet18(num_classes=10)
    model.conv1 = torch.nn.Conv2d(1, 64, kernel_size=7, stride=2, padding=3, bias=False)

    # Ray Train: to this worker's device, in DDP when world > 1
    model = ray.train.torch.prepare_model(model)
    plain = model.module if world > 1 else model  # the model inside DDP's wrapper
    optimizer = torch.optim.Adam(model.parameters(), lr=config["lr"])
    # Ray Train: a DistributedSampler gives each worker its shard (on a GPU, 4
    # processes decode images meanwhile)
    on_gpu = device.type != "cpu"
    loader = DataLoader(
        train_ds, batch, shuffle=True, num_workers=4 * on_gpu, pin_memory=on_gpu
    )
    loader = ray.train.torch.prepare_data_loader(loader)
    # this rank's share of the test digits
    test_loader = DataLoader(Subset(test_ds, range(rank, len(test_ds), world)), 512)

    start_epoch, history = 0, []
    checkpoint = ray.train.get_checkpoint()  # None on a fresh start, else the latest
    if checkpoint is not None:
        with checkpoint.as_directory() as directory:
            path = os.path.join(directory, "state.pt")
            state = torch.load(path, map_location="cpu", weights_only=True)
        plain.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])  # Adam's moments
        torch.set_rng_state(state["rng"])  # the shuffles of an uninterrupted run
        start_epoch, history = state["epoch"] + 1, state["history"]
    if rank == 0:
        what = "resuming" if checkpoint else "fresh start,"
        print(f"[rank 0] {what} at epoch {start_epoch}", flush=True)
    # this lesson's planted crashes: a function the driver may pass, called before each
    # step; without one the loop runs plain
    fault = config.get("fault")
    for epoch in range(start_epoch, config["epochs"]):
        if world > 1:
            loader.sampler.set_epoch(epoch)  # else every epoch shuffles the same way
        start = time.perf_counter()
        model.train()
        sums = torch.zeros(5, dtype=torch.float64, device=device)
        for step, (images, labels) in enumerate(loader):
            if fault:
                fault(rank=rank, epoch=epoch, step=step)
            loss = F.cross_entropy(model(images), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            sums[0] += loss.detach() * len(labels)
            sums[1] += len(labels)
        train_s = time.perf_counter() - start

        # each rank scores its share with rank 0's BatchNorm statistics (the saved
        # ones); one all-reduce sums the counts
        if world > 1:
            for buffer in plain.buffers():
                dist.broadcast(buffer, src=0)
        plain.eval()
        with torch.no_grad():
            for images, labels in test_loader:
                logits = plain(images.to(device))
                labels = labels.to(device)
                sums[2] += F.cross_entropy(logits, labels, reduction="sum")
                sums[3] += (logits.argmax(1) == labels).sum()
                sums[4] += len(labels)
        eval_s = time.perf_counter() - start - train_s
        if world > 1:
            dist.all_reduce(sums)
        loss_sum, images_sum, test_loss_sum, hits, scored = sums.tolist()
        metrics = {
            "epoch": epoch,
            "train_loss": loss_sum / images_sum,
            "test_loss": test_loss_sum / scored,
            "accuracy": hits / scored,
            "epoch_time_s": train_s,
            "images_per_s": images_sum / train_s,
            "eval_s": eval_s,  # this rank's, for its share
            "world_size": world,
            "start_epoch": start_epoch,  # where this attempt began
            "per_worker_batch": batch,  # section 13 changes the number of workers
        }
        history.append(metrics)

        # every rank reports; rank 0 attaches a checkpoint, with the RNG state too
        with tempfile.TemporaryDirectory() as directory:
            checkpoint = None
            if rank == 0:
                state = {
                    "model": plain.state_dict(),
                    "optimizer": optimizer.state_dict(),
                    "epoch": epoch,
                    "history": history,
                    "rng": torch.get_rng_state(),
                }
                torch.save(state, os.path.join(directory, "state.pt"))
                checkpoint = ray.train.Checkpoint.from_directory(directory)
            ray.train.report(metrics, checkpoint=checkpoint)
        if rank == 0:
            loss, accuracy = metrics["train_loss"], metrics["accuracy"]
            print(
                f"[rank 0] epoch {epoch}: loss {loss:.4f}, accuracy {accuracy:.3f}",
                flush=True,
            )


# From 04_fault_tolerance.ipynb, cell 29:
# '# 12. A loop that saves mid-epoch'.
def train_loop_mid_epoch(config: dict) -> None:
    """Section 03's loop, saving every config["checkpoint_every"] steps with the
    loader's place in the epoch: a restart continues at the next batch."""
    context = ray.train.get_context()
    rank, world = context.get_world_rank(), context.get_world_size()
    device = ray.train.torch.get_device()  # this worker's GPU, or the CPU
    batch = config["batch_size"] // world  # the global batch, split across workers
    torch.manual_seed(config["seed"])  # the same initial weights on every rank

    # section 03's data and model
    to_tensor = transforms.Compose(
        [transforms.ToTensor(), transforms.Normalize((0.1307,), (0.3081,))]
    )
    splits = []
    for train, size in ((True, config["train_size"]), (False, config["test_size"])):
        digits = datasets.MNIST(config["data_root"], train=train, transform=to_tensor)
        seeded = torch.Generator().manual_seed(config["seed"])
        order = torch.randperm(len(digits), generator=seeded)[:size]
        splits.append(Subset(digits, order.tolist()))
    train_ds, test_ds = splits
    model = torchvision.models.resnet18(num_classes=10)
    model.conv1 = torch.nn.Conv2d(1, 64, kernel_size=7, stride=2, padding=3, bias=False)
    model = ray.train.torch.prepare_model(model)
    plain = model.module if world > 1 else model  # the model inside DDP's wrapper
    optimizer = torch.optim.Adam(model.parameters(), lr=config["lr"])
    # This rank's shard, as prepare_data_loader gives it, but in torchdata's
    # StatefulDataLoader: its state_dict() is its place in the epoch.
    sampler = DistributedSampler(train_ds, world, rank, seed=config["seed"])
    loader = StatefulDataLoader(train_ds, batch_size=batch, sampler=sampler)
    test_loader = DataLoader(Subset(test_ds, range(rank, len(test_ds), world)), 512)

    epoch, step, history = 0, 0, []
    checkpoint = ray.train.get_checkpoint()  # None on a fresh start, else the latest
    if checkpoint is not None:
        with checkpoint.as_directory() as directory:
            path = os.path.join(directory, "state.pt")
            state = torch.load(path, map_location="cpu", weights_only=True)
        plain.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        torch.set_rng_state(state["rng"])
        # where the last save said to go on, and the rows reported before it
        epoch, step, history = state["next_epoch"], state["next_step"], state["history"]
        if step:  # saved mid-epoch: the loader skips the batches trained before it
            if state["world_size"] != world:  # each rank's shard depends on the world
                raise RuntimeError(
                    f"saved mid-epoch by {state['world_size']} workers, resumed by"
                    f" {world}: keep num_workers, or resume from an epoch's end"
                )
            # rank 0 saved its own place; every rank's is the same count of batches
            # in its own shard, so each rank restores it
            loader.load_state_dict(state["loader"])
    # where (and below, when) this attempt began: in every row it reports
    begun = {"start_epoch": epoch, "start_step": step}
    if rank == 0:
        print(
            f"[rank 0] {world} worker(s) on {device}, starting at epoch {epoch}, step"
            f" {step}" + (" (from the checkpoint)" if checkpoint else ""),
            flush=True,
        )
    fault = config.get("fault")  # this lesson's planted crashes, as in section 03
    every = config.get("checkpoint_every", 5)
    # "async" or "sync" uploads (section 15); a list takes turns (the course's
    # checkpoint benchmark measures both in one run)
    uploads = config.get("checkpoint_uploads", ["async"])

    def save(next_epoch: int, next_step: int, metrics: dict) -> None:
        """Report metrics, with a checkpoint that goes on at (next_epoch, next_step)."""
        started = time.perf_counter()
        done = next_step or len(loader)  # this epoch's batches done
        upload = uploads[len(history) % len(uploads)]
        row = {"epoch": epoch, "step": done, "world_size": world, **metrics}
        row.update(begun, upload=upload)
        history.append(row)
        checkpoint = None
        if rank == 0:
            if fault:  # this lesson's crash as rank 0 writes, if the config plants one
                fault(rank=rank, epoch=epoch, step=done, during="checkpoint")
            state = {
                "model": plain.state_dict(),
                "optimizer": optimizer.state_dict(),
                "epoch": epoch,
                "next_epoch": next_epoch,
                "next_step": next_step,
                # the loader's place in this epoch; at its end, a fresh epoch needs none
                "loader": loader.state_dict() if next_step else None,
                "world_size": world,
                "history": history,
                "rng": torch.get_rng_state(),
            }
            # mkdtemp, not a TemporaryDirectory: an async upload runs after report
            # returns; Ray deletes the folder once it is in storage
            directory = tempfile.mkdtemp()
            torch.save(state, os.path.join(directory, "state.pt"))
            checkpoint = ray.train.Checkpoint.from_directory(directory)
        # SYNC returns once Ray has copied the folder to storage; ASYNC at once, Ray's
        # thread copying it while training goes on (CheckpointUploadMode: a public API,
        # of alpha stability in Ray 2.60)
        ray.train.report(
            dict(row),  # a copy: the row gets its checkpoint_s below
            checkpoint=checkpoint,
            checkpoint_upload_mode=CheckpointUploadMode[upload.upper()],
            delete_local_checkpoint_after_upload=True,
        )
        # how long training waited; saved with the next checkpoint
        row["checkpoint_s"] = time.perf_counter() - started

    while epoch < config["epochs"]:
        sampler.set_epoch(epoch)  # the same shuffle as an uninterrupted run
        first, start = step, time.perf_counter()
        model.train()
        sums = torch.zeros(5, dtype=torch.float64, device=device)
        for step, (images, labels) in enumerate(loader, first):
            if fault:
                fault(rank=rank, epoch=epoch, step=step)
            begun.setdefault("first_step_at", time.time())
            images, labels = images.to(device), labels.to(device)
            loss = F.cross_entropy(model(images), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            sums[0] += loss.detach() * len(labels)
            sums[1] += len(labels)
            if (step + 1) % every == 0 and step + 1 < len(loader):
                save(epoch, step + 1, {})  # mid-epoch: go on at the next step
        train_s = time.perf_counter() - start

        # section 03's scoring: rank 0's BatchNorm statistics, one all-reduce
        if world > 1:
            for buffer in plain.buffers():
                dist.broadcast(buffer, src=0)
        plain.eval()
        with torch.no_grad():
            for images, labels in test_loader:
                logits = plain(images.to(device))
                labels = labels.to(device)
                sums[2] += F.cross_entropy(logits, labels, reduction="sum")
                sums[3] += (logits.argmax(1) == labels).sum()
                sums[4] += len(labels)
        if world > 1:
            dist.all_reduce(sums)
        loss_sum, images_sum, test_loss_sum, hits, scored = sums.tolist()
        metrics = {
            "train_loss": loss_sum / max(images_sum, 1),  # this attempt's steps
            "test_loss": test_loss_sum / scored,
            "accuracy": hits / scored,
            "epoch_time_s": train_s,
            "partial_epoch": first > 0,  # this attempt began mid-epoch
        }
        if rank == 0:
            print(
                f"[rank 0] epoch {epoch} done (steps {first}..{len(loader) - 1} in this"
                f" attempt): accuracy={metrics['accuracy']:.3f}",
                flush=True,
            )
        save(epoch + 1, 0, metrics)  # the epoch's end: go on at the next epoch
        epoch, step = epoch + 1, 0
