"""Ray Data for the course: digits as Parquet, a Ray Dataset over them, the fast transform, the
trainer around lesson 03's Ray Data loop (the loop is the lesson's, in ``lesson_code``), and
``measure_ingest``, which times pipelines (for lesson 03 and ``maintainer_tools.bench.ingest``).

The Parquet layout is two columns, ``image`` (the 784 uint8 pixels as one fixed-size value) and
``label`` (int64), uncompressed and without dictionary pages, in a few large files: reading it is
close to a plain copy, and the vectorised transform decodes a batch with one ``np.frombuffer``.
Two ways to preprocess, same values: ``per_row_pil`` (many tutorials' habit: per row, PIL and
torchvision, paying Python overhead per digit) and ``normalise_batch`` (a whole numpy batch at once).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import torch

from course_utils.core import data, steps, storage, training
from course_utils.core.batch_format import IMAGE, LABEL, check_columns
from course_utils.core.config import Profile, get_profile
from course_utils.core.progress import progress_bar
from course_utils.core.storage import Storage

SIDE = 28
PIXELS = SIDE * SIDE
SCHEMA = pa.schema([pa.field(IMAGE, pa.binary(PIXELS)), pa.field(LABEL, pa.int64())])
# How the digits are written. Measured here (pyarrow 26, 30,000 digits in one file): reading the
# image column took ≈ 28 ms snappy-compressed with a dictionary page, ≈ 7 ms uncompressed without
# one (3.3x the bytes on disk: 784 per digit). A fixed-size list of 784 uint8 instead
# (``pa.fixed_shape_tensor``) was read ≈ 5x slower than variable-size bytes: Parquet stores
# repetition levels for every pixel.
PARQUET_OPTIONS = {"compression": "none", "use_dictionary": False, "write_statistics": False}
# One file per core of this machine: the timed ingest paths (lesson 03, bench ingest) read 60,000
# digits from this many files. Measured here per pass of the vectorised path (fixed-size column,
# snappy, a busy machine): 8 files ≈ 0.37 s, 4 ≈ 0.31 s, 2 ≈ 0.29 s; each read task costs Ray Data
# a fixed scheduling overhead (a pipeline over 10 rows took ≈ 0.18 s). With the uncompressed
# layout, bench ingest measured vectorised 225-248 k rows/s, 12.9-13.9x the per-row PIL map.
BENCH_FILES = 2


def read_blocks(path: str | Path, *, store: Storage) -> int:
    """``override_num_blocks`` for ``read_parquet`` over course Parquet: one block per file, so a
    ``map_batches(batch_size=None)`` runs fused inside each file's read task. Without it Ray Data
    splits each file into more blocks and does not fuse."""
    return max(1, len(parquet_files(path, store=store)))


# --------------------------------------------------------------------------- Parquet export


def default_parquet_path(split: str = "train", rows: int | None = None, *, store: Storage) -> str:
    """Where the course keeps a Parquet copy of a split: in this learner's folder of the course
    storage, which every node of a cluster can read (a shared mount or ``s3://``)."""
    suffix = f"-{rows}" if rows is not None else ""
    return f"{store.mine}/datasets/mnist-{split}{suffix}.parquet"


def write_parquet(
    images: np.ndarray, labels: np.ndarray, path: str | Path, num_files: int = 4, *, store: Storage
) -> str:
    """Write uint8 digits ``[N, 28, 28]`` and labels ``[N]`` as ``num_files`` Parquet files; returns ``path``.

    Several files let Ray Data read in parallel; few large ones keep its per-task overhead low. A
    folder the course wrote there for this learner (``storage.OWNER_FILE``) is replaced; any other
    non-empty folder or a file raises ``CleanupRefused`` and nothing is deleted.
    """
    images = np.ascontiguousarray(images, dtype=np.uint8)
    if images.ndim != 3 or images.shape[1:] != (SIDE, SIDE):
        raise ValueError(f"images must be uint8 [N, {SIDE}, {SIDE}], got shape {images.shape}.")
    if len(labels) != len(images):
        raise ValueError(f"{len(images)} images but {len(labels)} labels.")
    path = str(path)
    fs, root = store.locate(path)
    _clear_own_folder(fs, root, path)
    storage.write_owner(fs, root, "parquet")  # creates the folder
    if path.startswith(store.mine + "/"):
        store.learner_filesystem()  # marks the learner's folder as the course's too
    for i, table in enumerate(_digit_tables(images, labels, num_files)):
        pq.write_table(table, f"{root}/part-{i:03d}.parquet", filesystem=fs, **PARQUET_OPTIONS)
    return path


def _digit_tables(images: np.ndarray, labels: np.ndarray, parts: int) -> list[pa.Table]:
    """uint8 digits ``[N, 28, 28]`` and labels as ``parts`` Arrow tables in the course's layout (``SCHEMA``)."""
    flat = np.ascontiguousarray(images, dtype=np.uint8).reshape(len(images), PIXELS)
    labels = np.asarray(labels, dtype=np.int64)
    tables = []
    for part in np.array_split(np.arange(len(images)), max(1, min(parts, len(images)))):
        pixels = pa.py_buffer(np.ascontiguousarray(flat[part]))  # no copy, no Python bytes per row
        column = pa.FixedSizeBinaryArray.from_buffers(SCHEMA.field(IMAGE).type, len(part), [None, pixels])
        tables.append(pa.Table.from_arrays([column, pa.array(labels[part], type=pa.int64())], schema=SCHEMA))
    return tables


def digits_dataset(images: np.ndarray, labels: np.ndarray, blocks: int = 4):
    """A Ray Dataset of digits in memory, in ``blocks`` blocks with the columns and types a
    ``read_parquet`` of course Parquet gives (``SCHEMA``); no files, so it works on any cluster."""
    import ray.data

    if len(labels) != len(images):
        raise ValueError(f"{len(images)} images but {len(labels)} labels.")
    # from_blocks keeps our blocks as they are; from_arrow would start a task per table to read it back.
    return ray.data.from_blocks(_digit_tables(images, labels, blocks))


def _clear_own_folder(fs: pafs.FileSystem, root: str, shown: str) -> None:
    """Empty folder ``root`` for a rewrite when the course wrote it for this learner; refuse otherwise."""
    info = fs.get_file_info(root)
    if info.type == pafs.FileType.NotFound:
        return
    if info.type != pafs.FileType.Directory:
        raise storage.CleanupRefused(
            f"Refusing to replace {shown}: it is a file, not a Parquet folder the course wrote. "
            "Choose another path or remove it yourself."
        )
    if not fs.get_file_info(pafs.FileSelector(root)):
        return  # an empty folder: nothing to delete
    storage.refuse_unless_mine(fs, root, shown, "replace")
    if isinstance(fs, pafs.LocalFileSystem):
        import shutil

        shutil.rmtree(root)  # never follows symlinks
    else:
        fs.delete_dir(root)


def export_mnist_parquet(
    split: str = "train",
    size: int | None = None,
    *,
    replicate: int = 1,
    path: str | Path | None = None,
    data_root: str | Path | None = None,
    seed: int = 0,
    num_files: int = 4,
    store: Storage,
) -> str:
    """Write the course's MNIST ``split`` (``size`` digits, as ``course_datasets`` picks them)
    to Parquet, ``replicate`` times over (benchmarks want full-MNIST-sized data), by default in this
    learner's folder of ``store``. Returns the path."""
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', not {split!r}.")
    if replicate < 1:
        raise ValueError(f"replicate must be at least 1, got {replicate}.")
    images, labels = data.raw_arrays(split == "train", size, data_root, seed)
    if replicate > 1:
        images, labels = np.tile(images, (replicate, 1, 1)), np.tile(labels, replicate)
    path = str(path) if path is not None else default_parquet_path(split, len(labels), store=store)
    return write_parquet(images, labels, path, num_files=num_files, store=store)


def parquet_files(path: str | Path, *, store: Storage) -> list[tuple[str, int]]:
    """(file name, size in bytes) of each Parquet file under ``path`` (local or ``s3://``)."""
    fs, root = store.locate(path)
    infos = fs.get_file_info(pafs.FileSelector(root))
    return sorted((i.base_name, i.size) for i in infos if i.base_name.endswith(".parquet"))


# --------------------------------------------------------------------------- Ray Dataset


def read_digits(path: str | Path, *, store: Storage, shuffle_files: bool = False):
    """``ray.data.read_parquet`` over course digits, after checking the path and the columns, so a
    wrong path or file fails here, in words, not later inside a read task."""
    import ray.data

    path = str(path)
    fs, root = store.locate(path)
    if fs.get_file_info(root).type == pafs.FileType.NotFound:
        raise FileNotFoundError(
            f"No Parquet data at {path}. Write it first with course_utils.lesson03.raydata.export_mnist_parquet()."
        )
    # The schema from the Parquet footers (no Ray task, no data read): a wrong file fails now.
    check_columns(pq.ParquetDataset(root, filesystem=fs).schema, what=f"Parquet data at {path}")
    return ray.data.read_parquet(
        root,
        filesystem=fs,
        shuffle="files" if shuffle_files else None,
        override_num_blocks=read_blocks(path, store=store),
    )


def normalise_batch(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The fast transform: a numpy batch of raw digits -> float32 ``[B, 1, 28, 28]``, normalised.

    Same arithmetic, same float32 rounding as torchvision's ``ToTensor`` (divide by 255) then
    ``Normalize`` (subtract the mean, divide by the std), for the whole batch in three numpy calls.
    """
    check_columns(batch, what="batch")
    raw = batch[IMAGE]
    if raw.dtype == object:  # Parquet (fixed-size) binary column: one bytes object per row
        pixels = np.frombuffer(b"".join(raw), dtype=np.uint8)
    else:  # already an array of pixels (e.g. a tensor column)
        pixels = np.ascontiguousarray(raw, dtype=np.uint8)
    # uint8 -> float32 inside the division: one pass and one new array, not astype + divide
    images = np.divide(pixels.reshape(-1, 1, SIDE, SIDE), np.float32(255), dtype=np.float32)
    images -= np.float32(data.MEAN)
    images /= np.float32(data.STD)
    return {IMAGE: images, LABEL: np.asarray(batch[LABEL], dtype=np.int64)}


def per_row_pil(row: dict[str, Any]) -> dict[str, Any]:
    """The slow transform, as many tutorials write it: one row -> PIL -> torchvision."""
    from PIL import Image

    pixels = np.frombuffer(row[IMAGE], dtype=np.uint8).reshape(SIDE, SIDE)
    image = data.TRANSFORM(Image.fromarray(pixels, mode="L"))
    return {IMAGE: image.numpy(), LABEL: int(row[LABEL])}


# --------------------------------------------------------------------------- training loop


# Rows each worker mixes in its local shuffle buffer (lesson 03, section 15).
SHUFFLE_BUFFER = 1000


def make_ray_data_trainer(
    name: str,
    dataset,
    profile: Profile | None = None,
    *,
    train_loop: Callable,
    shuffle_buffer: int = SHUFFLE_BUFFER,
    **kwargs: Any,
):
    """``training.make_trainer`` with ``datasets={"train": dataset}``, its columns checked first, fitting
    ``train_loop``: lesson 03's Ray Data loop (``train_loop_ray_data``, from its #@save cell)."""
    check_columns(dataset.schema())
    profile = profile or get_profile()
    return training.make_trainer(
        name,
        profile,
        train_loop=train_loop,
        datasets={"train": dataset},
        shuffle_buffer=shuffle_buffer,
        reported_metrics=(*steps.REPORTED_METRICS, "rows_seen_rank"),
        **kwargs,
    )


# --------------------------------------------------------------------------- timing ingest


def consume(ds) -> int:
    """Pull every row of a Ray Dataset to the caller, as a training loop would; returns the count."""
    rows = 0
    for batch in ds.iter_batches(batch_size=None, batch_format="numpy"):
        rows += len(batch[LABEL])
    return rows


def _consume_loader(loader: torch.utils.data.DataLoader) -> int:
    """Pull every batch of a DataLoader; returns the row count."""
    return sum(len(labels) for _, labels in loader)


def shuffle_pipelines(ds: Any, batch_size: int = 64, buffer_rows: int = 1000) -> dict[str, Any]:
    """The three shuffle levels lesson 03 compares, each a function that iterates ``ds`` afresh in
    torch batches (for ``measure_ingest``): none, a local buffer on the reader, and a full
    ``random_shuffle()`` (an all-to-all through the object store). ``bench ingest`` times the same."""
    return {
        "no shuffle": lambda: ds.iter_torch_batches(batch_size=batch_size),
        f"local buffer {buffer_rows:,}": lambda: ds.iter_torch_batches(
            batch_size=batch_size, local_shuffle_buffer_size=buffer_rows
        ),
        "random_shuffle()": lambda: ds.random_shuffle().iter_torch_batches(batch_size=batch_size),
    }


def measure_ingest(pipelines: dict[str, Any], rounds: int = 3, progress: bool = True):
    """Rows/s of each pipeline: its best of ``rounds`` interleaved passes (A, B, C, A, B, C, ...),
    in a DataFrame with its speed-up over the first (slowest) one.

    A pipeline is a Ray Dataset, a DataLoader, or a function returning dict batches (to time
    ``iter_torch_batches`` options). An untimed first pass warms each up. Interleaving makes a busy
    neighbour slow all alike, and the best pass (as ``timeit`` reports) is the least disturbed: on
    a shared machine medians of short passes swung the ratio from 6x to 9x between runs.
    """
    import pandas as pd

    if rounds < 1:
        raise ValueError(f"rounds must be at least 1, got {rounds}.")

    def run(p: Any) -> int:
        if isinstance(p, torch.utils.data.DataLoader):
            return _consume_loader(p)
        if callable(p):  # a function returning fresh dict batches, e.g. lambda: ds.iter_torch_batches()
            return sum(len(batch[LABEL]) for batch in p())
        return consume(p)

    times: dict[str, list[float]] = {name: [] for name in pipelines}
    rows: dict[str, int] = {}
    steps = [(r, name) for r in range(rounds + 1) for name in pipelines]
    for r, name in progress_bar(steps, desc="ingest rounds", disable=not progress):
        start = time.perf_counter()
        rows[name] = run(pipelines[name])
        if r > 0:  # round 0 is the warm-up
            times[name].append(time.perf_counter() - start)
    table = pd.DataFrame(
        [
            {"pipeline": name, "rows": rows[name], "best_s": min(t), "median_s": float(np.median(t))}
            for name, t in times.items()
        ]
    )
    table["rows_per_s"] = table["rows"] / table["best_s"]
    table["speedup"] = table["rows_per_s"] / table["rows_per_s"].iloc[0]
    return table
