"""Unit tests for course_utils.lesson03.raydata: Parquet export, schema checks, the two transforms, the
batch adapter the Ray Data loop uses, and measure_ingest. No Ray cluster."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest
import torch
from PIL import Image

from course_utils import lesson_code
from course_utils.core import batch_format, checkpoints, config, data, steps, training
from course_utils.core.storage import CleanupRefused, read_owner
from course_utils.core.storage import resolve as resolve_storage
from course_utils.lesson03 import raydata
from maintainer_tools import fits
from maintainer_tools.bench.ingest import DigitsDataset


@pytest.fixture(scope="module")
def digits(mnist_root):
    """512 real training digits (uint8 [N, 28, 28]) and their labels."""
    return data.raw_arrays(True, 512, mnist_root)


def _bytes_column(images: np.ndarray) -> np.ndarray:
    """What a numpy batch of the Parquet ``image`` column looks like: an object array of bytes."""
    column = np.empty(len(images), dtype=object)
    column[:] = [img.tobytes() for img in images]
    return column


def test_vectorised_transform_equals_torchvision_on_real_digits(digits):
    images, labels = digits
    out = raydata.normalise_batch({"image": _bytes_column(images), "label": labels})
    expected = torch.stack([data.TRANSFORM(Image.fromarray(img, mode="L")) for img in images]).numpy()
    assert out["image"].dtype == np.float32
    assert out["image"].shape == (len(images), 1, 28, 28)
    np.testing.assert_allclose(out["image"], expected, rtol=0, atol=1e-6)
    np.testing.assert_array_equal(out["label"], labels)
    assert out["label"].dtype == np.int64


def test_vectorised_transform_accepts_pixel_arrays(digits):
    images, labels = digits
    from_bytes = raydata.normalise_batch({"image": _bytes_column(images[:8]), "label": labels[:8]})
    from_pixels = raydata.normalise_batch({"image": images[:8], "label": labels[:8]})
    np.testing.assert_array_equal(from_bytes["image"], from_pixels["image"])


def test_per_row_reference_transform_matches_vectorised(digits):
    images, labels = digits
    fast = raydata.normalise_batch({"image": _bytes_column(images[:16]), "label": labels[:16]})
    for i in range(16):
        row = raydata.per_row_pil({"image": images[i].tobytes(), "label": labels[i]})
        np.testing.assert_allclose(row["image"], fast["image"][i], rtol=0, atol=1e-6)
        assert row["label"] == labels[i]


def test_batch_without_needed_columns_is_a_clear_error(digits):
    images, _ = digits
    with pytest.raises(batch_format.DatasetColumnsError) as info:
        raydata.normalise_batch({"pixels": images[:2]})
    message = str(info.value)
    assert "missing ['image', 'label']" in message and "pixels" in message


def test_write_parquet_round_trip_and_rewrite_replaces(tmp_path, digits):
    images, labels = digits
    path = tmp_path / "digits.parquet"
    raydata.write_parquet(images, labels, path, num_files=3, store=resolve_storage())
    raydata.write_parquet(
        images, labels, path, num_files=3, store=resolve_storage()
    )  # again: replaced, not doubled
    files = sorted(path.glob("*.parquet"))
    assert len(files) == 3
    table = pq.read_table(path)
    assert table.schema.equals(raydata.SCHEMA)
    assert table.num_rows == len(labels)
    pixels = np.frombuffer(b"".join(table.column("image").to_pylist()), dtype=np.uint8)
    np.testing.assert_array_equal(pixels.reshape(-1, 28, 28), images)
    np.testing.assert_array_equal(table.column("label").to_numpy(), labels)


def test_write_parquet_layout_is_fixed_size_and_uncompressed(tmp_path, digits):
    """The layout the fast path relies on: one FIXED_LEN_BYTE_ARRAY of 784 bytes per digit, no
    compression, no dictionary page; rows still come back as bytes for the per-row transform."""
    images, labels = digits
    path = tmp_path / "digits.parquet"
    raydata.write_parquet(images[:64], labels[:64], path, num_files=1, store=resolve_storage())
    (file,) = sorted(path.glob("*.parquet"))
    meta = pq.ParquetFile(file).metadata
    assert meta.num_row_groups == 1
    column = meta.row_group(0).column(0)
    assert column.path_in_schema == "image" and column.physical_type == "FIXED_LEN_BYTE_ARRAY"
    assert column.compression == "UNCOMPRESSED" and not column.has_dictionary_page
    row = pq.read_table(file).slice(5, 1).to_pylist()[0]
    assert isinstance(row["image"], bytes) and len(row["image"]) == 784
    expected = data.TRANSFORM(Image.fromarray(images[5], mode="L")).numpy()
    np.testing.assert_allclose(raydata.per_row_pil(row)["image"], expected, rtol=0, atol=1e-6)


def test_write_parquet_rejects_bad_shapes(tmp_path, digits):
    images, labels = digits
    with pytest.raises(ValueError) as wrong_shape:
        raydata.write_parquet(
            images.reshape(len(images), -1), labels, tmp_path / "a", store=resolve_storage()
        )
    with pytest.raises(ValueError) as wrong_count:
        raydata.write_parquet(images, labels[:-1], tmp_path / "b", store=resolve_storage())
    assert "[N, 28, 28]" in str(wrong_shape.value)
    assert "labels" in str(wrong_count.value)


def test_write_parquet_replaces_only_a_folder_the_course_wrote(tmp_path, digits, monkeypatch):

    images, labels = digits
    monkeypatch.setenv("COURSE_LEARNER", "alice")
    foreign = tmp_path / "my-thesis"  # a folder the course did not write
    foreign.mkdir()
    (foreign / "chapter1.tex").write_text("precious")
    teammate = tmp_path / "bob-digits.parquet"
    monkeypatch.setenv("COURSE_LEARNER", "bob")
    raydata.write_parquet(images, labels, teammate, num_files=2, store=resolve_storage())
    monkeypatch.setenv("COURSE_LEARNER", "alice")
    a_file = tmp_path / "notes.txt"
    a_file.write_text("keep")
    for path, says in (
        (foreign, "no .course-owner.json"),
        (teammate, "learner 'bob'"),
        (a_file, "is a file"),
    ):
        with pytest.raises(CleanupRefused) as info:
            raydata.write_parquet(images, labels, path, store=resolve_storage())
        assert "Refusing to replace" in str(info.value) and says in str(info.value)
    assert (foreign / "chapter1.tex").read_text() == "precious" and len(list(foreign.iterdir())) == 1
    assert len(list(teammate.glob("*.parquet"))) == 2 and a_file.read_text() == "keep"

    empty = tmp_path / "empty"  # an empty folder has nothing to lose: written into
    empty.mkdir()
    raydata.write_parquet(images, labels, empty, num_files=2, store=resolve_storage())
    assert read_owner(pafs.LocalFileSystem(), str(empty))["kind"] == "parquet"
    assert pq.read_table(empty).num_rows == len(labels)  # the record is not read as data


def test_export_mnist_parquet_replicates_under_storage(storage, mnist_root):
    path = raydata.export_mnist_parquet(
        "train", 100, replicate=3, data_root=mnist_root, store=resolve_storage()
    )
    assert path.startswith(str(storage))
    table = pq.read_table(path)
    assert table.num_rows == 300
    labels = table.column("label").to_numpy()
    np.testing.assert_array_equal(labels[:100], data.raw_arrays(True, 100, mnist_root)[1])
    with pytest.raises(ValueError):
        raydata.export_mnist_parquet("validation", 10, data_root=mnist_root, store=resolve_storage())


def test_read_digits_missing_path_names_it(tmp_path):
    missing = tmp_path / "nowhere.parquet"
    with pytest.raises(FileNotFoundError) as info:
        raydata.read_digits(missing, store=resolve_storage())
    assert str(missing) in str(info.value)
    assert "export_mnist_parquet" in str(info.value)


def test_read_digits_wrong_columns_fails_before_ray(tmp_path):
    path = tmp_path / "other"
    path.mkdir()
    table = pa.table({"pixels": pa.array([b"x" * 784]), "target": pa.array([1], type=pa.int64())})
    pq.write_table(table, path / "part-000.parquet")
    with pytest.raises(batch_format.DatasetColumnsError) as info:
        raydata.read_digits(path, store=resolve_storage())
    assert "missing ['image', 'label']" in str(info.value)
    assert "pixels" in str(info.value)


class FakeShard:
    """Stands in for ``ray.train.get_dataset_shard``: records the call, yields dict batches."""

    def __init__(self, images: torch.Tensor, labels: torch.Tensor):
        self.images, self.labels, self.calls = images, labels, []

    def iter_torch_batches(self, **kwargs):
        self.calls.append(kwargs)
        size = kwargs["batch_size"]
        for i in range(0, len(self.labels), size):
            yield {"image": self.images[i : i + size], "label": self.labels[i : i + size]}


def _shard(digits, rows: int = 64) -> FakeShard:
    images, labels = digits
    out = raydata.normalise_batch({"image": images[:rows], "label": labels[:rows]})
    return FakeShard(torch.from_numpy(out["image"]), torch.from_numpy(out["label"]))


def test_train_loop_ray_data_streams_the_shard_and_reports_every_epoch(digits, mnist_root, monkeypatch):
    """The lesson 03 loop on one fake worker: Ray Train's calls stand in, the training is real."""
    import ray.train
    import ray.train.torch

    shard = _shard(digits)
    reports = []

    class OneWorker:
        def get_world_rank(self):
            return 0

        def get_world_size(self):
            return 1

    def report(metrics, checkpoint=None):
        saved = checkpoints.load_state(checkpoint) if checkpoint is not None else None
        reports.append((metrics, saved))

    def no_restore():
        raise AssertionError("lesson 03's loop does not restore (that is lesson 04)")

    monkeypatch.setattr(ray.train, "get_context", OneWorker)
    monkeypatch.setattr(ray.train, "get_dataset_shard", {"train": shard}.get)
    monkeypatch.setattr(ray.train, "get_checkpoint", no_restore)
    monkeypatch.setattr(ray.train, "report", report)
    monkeypatch.setattr(ray.train.torch, "get_device", lambda: torch.device("cpu"))
    monkeypatch.setattr(ray.train.torch, "prepare_model", lambda model: model)
    profile = config.SMOKE.with_(epochs=2, train_size=64, test_size=32, batch_size=16)
    lesson_code.train_loop_ray_data(training.loop_config(profile, data_root=mnist_root, shuffle_buffer=32))

    assert [call["batch_size"] for call in shard.calls] == [16, 16]  # one worker: the whole batch
    assert {call["device"] for call in shard.calls} == {torch.device("cpu")}
    assert shard.calls[0]["dtypes"] == {"image": torch.float32, "label": torch.int64}
    assert [call["local_shuffle_buffer_size"] for call in shard.calls] == [32, 32]
    seeds = [call["local_shuffle_seed"] for call in shard.calls]
    assert seeds[0] != seeds[1], "every epoch shuffles differently"
    assert [metrics["epoch"] for metrics, _ in reports] == [0, 1]
    assert all(metrics["rows_seen_rank"] == 64 for metrics, _ in reports)
    assert set(reports[0][0]) >= set(steps.REPORTED_METRICS) | {"rows_seen_rank"}
    assert [saved["epoch"] for _, saved in reports] == [0, 1]  # rank 0 attaches a checkpoint
    assert [row["epoch"] for row in reports[1][1]["history"]] == [0, 1]


def test_make_trainer_defaults_the_shuffle_buffer(monkeypatch):
    seen = {}
    monkeypatch.setattr(training, "make_trainer", lambda name, profile, **kwargs: seen.update(kwargs))
    schema = pa.schema([("image", pa.binary()), ("label", pa.int64())])

    class Dataset:
        def schema(self):
            return schema

    raydata.make_ray_data_trainer(
        "lesson03-unit",
        Dataset(),
        config.SMOKE,
        store=resolve_storage(),
        train_loop=lesson_code.train_loop_ray_data,
    )
    assert seen["train_loop"] is lesson_code.train_loop_ray_data
    assert seen["shuffle_buffer"] == raydata.SHUFFLE_BUFFER


def test_measure_ingest_table_on_dataloaders(digits):
    images, labels = digits
    slow = torch.utils.data.DataLoader(DigitsDataset(images, labels), batch_size=64)
    fast = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(torch.zeros(len(labels), 1, 28, 28), torch.from_numpy(labels)),
        batch_size=256,
    )
    table = raydata.measure_ingest({"slow": slow, "fast": fast}, rounds=2, progress=False)
    assert list(table["pipeline"]) == ["slow", "fast"]
    assert (table["rows"] == len(labels)).all()
    assert table["speedup"].iloc[0] == pytest.approx(1.0)
    assert (table["rows_per_s"] > 0).all()
    with pytest.raises(ValueError):
        raydata.measure_ingest({"slow": slow}, rounds=0)


def test_measure_ingest_accepts_batch_functions(digits):
    _, labels = digits
    batches = [{"label": labels[:100]}, {"label": labels[100:]}]
    table = raydata.measure_ingest({"calls": lambda: iter(batches)}, rounds=1, progress=False)
    assert table["rows"].iloc[0] == len(labels)


def test_parquet_paths_under_s3_storage_are_located_in_the_course_filesystem(monkeypatch):
    import pyarrow.fs as pafs

    monkeypatch.setenv("COURSE_STORAGE", "s3://bucket/prefix")
    monkeypatch.setenv("COURSE_S3_ENDPOINT", "http://127.0.0.1:9")
    store = resolve_storage()
    fs, inner = store.locate(raydata.default_parquet_path("train", 10, store=store))
    assert isinstance(fs, pafs.S3FileSystem)
    assert inner == f"bucket/prefix/{resolve_storage().folder}/datasets/mnist-train-10.parquet"


def test_read_blocks_is_one_block_per_parquet_file(tmp_path, digits):
    images, labels = digits
    path = raydata.write_parquet(
        images, labels, tmp_path / "digits.parquet", num_files=3, store=resolve_storage()
    )
    assert raydata.read_blocks(path, store=resolve_storage()) == 3


def test_configure_data_context_uses_the_pre_260_parquet_reader_quietly():
    import ray.data

    ctx = ray.data.DataContext()
    # The switch is DataContext's documented field (Ray 2.58 and 2.60): if a Ray release drops it,
    # setting it would do nothing and lesson 03's reads would pay for footer-reading actors again.
    assert "use_datasource_v2" in {f.name for f in __import__("dataclasses").fields(ray.data.DataContext)}, (
        "ray.data.DataContext.use_datasource_v2 is gone: see fits.configure_data_context and lesson 03 section 01"
    )
    assert ctx.use_datasource_v2 is True  # Ray 2.60's default, which the course switches off
    assert fits.configure_data_context(ctx) is ctx
    assert ctx.use_datasource_v2 is False and ctx.enable_progress_bars is False


def test_shuffle_pipelines_are_the_three_levels_in_order():
    class Fake:
        def iter_torch_batches(self, **kwargs):
            return [kwargs]

        def random_shuffle(self):
            return self

    levels = raydata.shuffle_pipelines(Fake(), batch_size=64, buffer_rows=1000)
    assert list(levels) == ["no shuffle", "local buffer 1,000", "random_shuffle()"]
    assert levels["local buffer 1,000"]() == [{"batch_size": 64, "local_shuffle_buffer_size": 1000}]
