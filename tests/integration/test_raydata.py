"""Ray Data on the local cluster: the transforms agree inside Ray Data, and a dataset without the
columns the loop reads is refused before ``fit()``. A 2-worker fit fed by ``datasets=`` is lesson 03's
(its self-check: one report per epoch, the loss falls, held-out accuracy; section 19: the rows split
between the ranks)."""

from __future__ import annotations

import numpy as np
import pytest

from course_utils.core import batch_format, data
from course_utils.core.storage import resolve as resolve_storage
from course_utils.lesson03 import raydata
from course_utils.lesson_code import train_loop_ray_data
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
    path = raydata.export_mnist_parquet(
        "train", 300, data_root=mnist_root, num_files=2, store=resolve_storage()
    )
    ds = raydata.read_digits(path, store=resolve_storage())
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
        raydata.make_ray_data_trainer(
            "lesson03-bad-columns", ds, store=resolve_storage(), train_loop=train_loop_ray_data
        )
    assert "missing ['image', 'label']" in str(info.value)
    assert not storage.joinpath("lesson03-bad-columns").exists()
