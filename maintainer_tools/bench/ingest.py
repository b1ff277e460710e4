"""``python -m maintainer_tools.bench ingest``: rows/s of the ingest paths lesson 03 compares, on
full-MNIST-sized replicated digits: per-row PIL ``map``, vectorised ``map_batches``, the bare
read, and a plain torch ``DataLoader`` over ``DigitsDataset``; then lesson 03's shuffle table
(``raydata.shuffle_pipelines`` over the vectorised pipeline). Timing is ``raydata.measure_ingest``
(the lesson's own); the Parquet layout is ``raydata.write_parquet``'s (the lesson's too): one
fixed-size 784-byte value per digit, uncompressed, in ``raydata.BENCH_FILES`` large files. Ray Data
is set up as the lesson sets it (``fits.configure_data_context``)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.fs as pafs
import ray.data
import torch

from course_utils.core import data, session
from course_utils.core.storage import resolve as resolve_storage
from course_utils.lesson03 import raydata
from maintainer_tools import fits


class DigitsDataset(torch.utils.data.Dataset):
    """Raw digits behind a map-style Dataset that decodes one item at a time through PIL and
    torchvision, as ``torchvision.datasets.MNIST`` does: the plain-PyTorch baseline."""

    def __init__(self, images: np.ndarray, labels: np.ndarray):
        self.images, self.labels = images, labels

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        from PIL import Image

        return data.TRANSFORM(Image.fromarray(self.images[i], mode="L")), int(self.labels[i])


def ingest_pipelines(path: str | Path, loader_rows: tuple[np.ndarray, np.ndarray] | None = None):
    """The pipelines the bench compares, over the same Parquet digits: per-row PIL ``map``,
    vectorised ``map_batches``, the bare read (the floor), and (given the raw arrays) a torch DataLoader."""
    ds = raydata.read_digits(path, store=resolve_storage())
    pipelines: dict[str, Any] = {
        "per_row_map_pil": fits.preprocess(ds, fast=False),
        "vectorised_map_batches": fits.preprocess(ds, fast=True),
        # The floor: the same read with no transform. The vectorised path cannot beat it.
        "read_only_no_transform": ds,
    }
    if loader_rows is not None:
        pipelines["torch_dataloader_pil"] = torch.utils.data.DataLoader(
            DigitsDataset(*loader_rows), batch_size=256, shuffle=False
        )
    return pipelines


def bench_name(label: str) -> str:
    """``"local buffer 1,000"`` -> ``"local_buffer_1000"``: a table label as a ``name: value`` key."""
    import re

    return re.sub(r"[^a-z0-9]+", "_", label.lower().replace(",", "")).strip("_")


def main(argv: Sequence[str] | None = None) -> dict[str, float]:
    """Rows/s of the three ingest paths on replicated
    digits (full-MNIST size by default), side by side, ending with the vectorised/per-row ratio."""
    parser = argparse.ArgumentParser(prog="python -m maintainer_tools.bench ingest", description=main.__doc__)
    parser.add_argument("--rows", type=int, default=60_000, help="rows to measure (digits replicated)")
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds per pipeline (best of)")
    parser.add_argument("--shuffle-rounds", type=int, default=2, help="timed rounds per shuffle level")
    parser.add_argument(
        "--files",
        type=int,
        default=raydata.BENCH_FILES,
        help="Parquet files (read tasks); few large ones keep Ray Data's per-task overhead low",
    )
    args = parser.parse_args(argv)

    data.ensure_mnist(verbose=False)
    images, labels = data.raw_arrays(True)
    replicate = -(-args.rows // len(labels))
    images = np.tile(images, (replicate, 1, 1))[: args.rows]
    labels = np.tile(labels, replicate)[: args.rows]
    started_here = not ray.is_initialized()
    session.start_ray(verbose=False, include_dashboard=False)  # a bench needs no dashboard: ≈ 15 s less
    fits.configure_data_context()
    # In the course storage, not /tmp: on a cluster every node must read the files.
    path = raydata.default_parquet_path("ingest-bench", args.rows, store=resolve_storage())
    try:
        raydata.write_parquet(images, labels, path, num_files=args.files, store=resolve_storage())
        pipelines = ingest_pipelines(path, (images, labels))
        table = raydata.measure_ingest(pipelines, rounds=args.rounds, progress=False)
        shuffles = raydata.measure_ingest(
            raydata.shuffle_pipelines(pipelines["vectorised_map_batches"]),
            rounds=args.shuffle_rounds,
            progress=False,
        )
    finally:
        fs, root = resolve_storage().locate(path)
        if fs.get_file_info(root).type != pafs.FileType.NotFound:
            fs.delete_dir(root)
        if started_here:
            ray.shutdown()
    print(f"ray_version: {ray.__version__}")
    out: dict[str, float] = {"rows": args.rows, "rounds": args.rounds, "parquet_files": args.files}
    for row in table.itertuples():
        out[f"{row.pipeline}_rows_per_s"] = row.rows_per_s
    for row in table.itertuples():
        out[f"{row.pipeline}_best_s"] = row.best_s
    for row in shuffles.itertuples():
        out[f"shuffle_{bench_name(row.pipeline)}_best_s"] = row.best_s
    out["vectorised_over_per_row"] = (
        out["vectorised_map_batches_rows_per_s"] / out["per_row_map_pil_rows_per_s"]
    )
    for name, value in out.items():
        print(
            f"{name}: {value:.2f}" if isinstance(value, float) and value < 100 else f"{name}: {value:.0f}",
            flush=True,
        )
    return out
