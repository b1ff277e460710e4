"""What the benches and tests build fits and pipelines from, the way the lessons build them.

The lessons write these steps in their own cells; a bench or a test that must do the same (read lesson 03's
Parquet the lesson's way, train lesson 04's mid-epoch loop, score a checkpoint) takes them from here, so
that ``course_utils`` holds only what a lesson imports.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from course_utils.core import checkpoints, data, steps
from course_utils.core.batch_format import check_columns
from course_utils.core.config import Profile, get_profile
from course_utils.core.model import unwrap
from course_utils.core.storage import resolve as resolve_storage
from course_utils.core.training import make_trainer
from course_utils.lesson03.raydata import normalise_batch, per_row_pil, read_digits

# ``map_batches(batch_size=None)``: one call per block (a Parquet row group), so Ray Data fuses
# the transform into the read task (ReadParquet->MapBatches) and the raw bytes never take an extra
# hop through the object store. Measured here on 60,000 rows (old layout): ≈ 196 k rows/s vs
# ≈ 135 k rows/s with batch_size=4096, which splits the pipeline into two operators. The fusion
# also needs one block per file (``read_blocks``): when Ray Data splits a file's output further,
# it keeps the read and the transform apart (Ray 2.58 and 2.60 alike).
TRANSFORM_BATCH = None


def configure_data_context(ctx: Any = None) -> Any:
    """Ray Data settings for the course (lesson 03 sets the same two on screen): no progress bars
    (a notebook's stdout is no terminal, so every pipeline would log its bar line by line) and
    the Parquet reader Ray had before 2.60.

    Why the older reader: Ray 2.60 made the DataSourceV2 reader the default for ``read_parquet``;
    it lists files in a ``ListFiles`` task that starts a pool of footer-reading actors (32 unless
    ``RAY_DATA_PARQUET_FOOTER_NUM_ACTORS`` says otherwise) for every read and kills them after. Made
    for many files in cloud storage; for a few local files those process starts are most of a
    read's time (docs/design.md: measured side by side with 2.58). ``use_datasource_v2`` is
    ``DataContext``'s documented switch (also ``RAY_DATA_USE_DATASOURCE_V2=0``). Returns the context.
    """
    import ray.data

    ctx = ctx or ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False
    ctx.use_datasource_v2 = False
    return ctx


def preprocess(ds, *, fast: bool = True):
    """The dataset with the course transform applied, the fast (default) or the slow way."""
    check_columns(ds.schema())
    if fast:
        return ds.map_batches(normalise_batch, batch_format="numpy", batch_size=TRANSFORM_BATCH)
    return ds.map(per_row_pil)


def training_dataset(path: str | Path):
    """What the lesson hands to ``TorchTrainer(datasets={"train": ...})``: read + fast transform."""
    return preprocess(read_digits(path, shuffle_files=True, store=resolve_storage()))


def evaluate_checkpoint(checkpoint: Any, profile: Profile | None = None) -> dict[str, float]:
    """Loss and accuracy of a checkpoint on the held-out test digits (driver side, lesson 02's way)."""
    from course_utils.core.device import get_device

    profile = profile or get_profile()
    device = get_device()
    model = checkpoints.load_model(checkpoint, map_location=device)
    test_ds = data.take(data.mnist(False), profile.test_size, profile.seed)
    return steps.evaluate(unwrap(model), data.make_loader(test_ds, 512, shuffle=False), device)


def make_trainer_mid_epoch(
    name: str,
    profile: Profile | None = None,
    *,
    num_workers: int | None = None,
    max_failures: int = 1,
    num_to_keep: int = 2,
    **config_overrides: Any,
):
    """``make_trainer`` for lesson 04's ``train_loop_mid_epoch``: checkpoints kept by recency, not
    score (mid-epoch reports carry no accuracy)."""
    from course_utils.lesson_code import train_loop_mid_epoch  # written in lesson 04's #@save cell

    return make_trainer(
        name,
        profile,
        num_workers=num_workers,
        num_to_keep=num_to_keep,
        max_failures=max_failures,
        store=resolve_storage(),
        train_loop=train_loop_mid_epoch,
        score_attribute=None,
        **config_overrides,
    )
