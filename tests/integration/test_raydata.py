"""Ray Data + Ray Train on the local cluster: the transforms agree inside Ray Data, and a
2-worker fit fed by ``datasets=`` runs on this machine's CPU slots (no stall) and learns."""

from __future__ import annotations

import numpy as np
import pytest

from course_utils import batch_format, config, data, history, raydata
from course_utils import storage as runs
from maintainer_tools import fits

pytestmark = pytest.mark.integration


@pytest.fixture
def ordered():
    """Keep Ray Data's output order for one test (comparisons row by row)."""
    import ray.data

    options = ray.data.DataContext.get_current().execution_options
    before = options.preserve_order
    options.preserve_order = True
    yield
    options.preserve_order = before


def test_fast_and_slow_paths_agree_in_ray_data(ray_session, storage, mnist_root, ordered):
    fits.configure_data_context()  # as lesson 03 and the bench: the pre-2.60 Parquet reader
    path = raydata.export_mnist_parquet("train", 300, data_root=mnist_root, num_files=2)
    ds = raydata.read_digits(path)
    assert set(ds.schema().names) == {"image", "label"}
    fast_ds = fits.preprocess(ds, fast=True)
    assert raydata.consume(fast_ds) == 300
    # One block per file: the transform runs inside the read tasks (lesson 03 says so and shows it).
    assert "ReadParquet->MapBatches(normalise_batch)" in fast_ds.stats()
    fast = fast_ds.take_batch(300, batch_format="numpy")
    slow = fits.preprocess(ds, fast=False).take_batch(300, batch_format="numpy")
    assert fast["image"].shape == (300, 1, 28, 28) and fast["image"].dtype == np.float32
    np.testing.assert_allclose(fast["image"], slow["image"], rtol=0, atol=1e-6)
    np.testing.assert_array_equal(fast["label"], data.raw_arrays(True, 300, mnist_root)[1])


def test_trainer_rejects_dataset_without_needed_columns(ray_session, storage):
    import ray.data

    ds = ray.data.from_items([{"pixels": b"\0" * 784, "target": 1}])
    with pytest.raises(batch_format.DatasetColumnsError) as info:
        raydata.make_ray_data_trainer("lesson03-bad-columns", ds)
    assert "missing ['image', 'label']" in str(info.value)
    assert not storage.joinpath("lesson03-bad-columns").exists()


def test_two_worker_ray_data_fit_runs_and_loss_falls(ray_session, storage, mnist_root):
    import ray

    # The resource split the lesson relies on: 2 training workers x 1 CPU slot, and slots left
    # for Ray Data's read/transform tasks (2 workers on exactly 2 slots stalls for good).
    assert ray.cluster_resources()["CPU"] >= 4
    profile = config.get_profile().with_(epochs=2, train_size=1000, test_size=200, batch_size=64)
    path = raydata.export_mnist_parquet("train", profile.train_size, data_root=mnist_root)
    name = "lesson03-it"
    runs.reset_run(name)
    trainer = raydata.make_ray_data_trainer(name, fits.training_dataset(path), profile, shuffle_buffer=256)
    result = trainer.fit()
    epochs = history.metric_history(result)
    assert list(epochs["epoch"]) == [0, 1]
    assert epochs["train_loss"].iloc[1] < epochs["train_loss"].iloc[0]
    # Each epoch the two shards together cover the dataset once, split between the ranks.
    assert (epochs["images_per_s"] > 0).all()
    assert epochs["rows_seen_rank"].between(400, 600).all()
    assert epochs["world_size"].eq(2).all()
    scored = fits.evaluate_checkpoint(result.checkpoint, profile)
    assert scored["accuracy"] > 0.3  # well above chance (0.1) after 2 short epochs
