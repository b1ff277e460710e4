"""Unit tests for course_utils.lesson05.inference: input handling, scoring maths, the actor classes in-process."""

from __future__ import annotations

import os
import time

import numpy as np
import pytest
import ray.train
import torch

from course_utils import lesson_inference
from course_utils.core import batch_format, config, data, progress
from course_utils.core.checkpoints import load_model
from course_utils.core.model import predict
from course_utils.core.storage import resolve as resolve_storage
from course_utils.lesson05 import inference, inference_timing
from course_utils.lesson_inference import BatchPredictor


@pytest.fixture(scope="module")
def checkpoint_dir(tmp_path_factory):
    return inference.placeholder_checkpoint(resolve_storage(), tmp_path_factory.mktemp("ckpt"))


def test_to_model_input_matches_the_training_transform(mnist_root):
    images, _ = data.raw_arrays(train=False, size=4, root=mnist_root)
    expected = torch.stack([data.TRANSFORM(img.numpy() if hasattr(img, "numpy") else img) for img in images])
    got = batch_format.to_model_input(images)
    assert got.shape == (4, 1, 28, 28)
    assert torch.allclose(got, expected, atol=1e-6)


def test_to_model_input_shapes_and_read_only_arrays():
    one = np.zeros((28, 28), dtype=np.uint8)
    assert batch_format.to_model_input(one).shape == (1, 1, 28, 28)
    read_only = np.zeros((3, 28, 28), dtype=np.uint8)
    read_only.setflags(write=False)  # what Ray hands an actor
    assert batch_format.to_model_input(read_only).shape == (3, 1, 28, 28)
    normalised = torch.randn(2, 1, 28, 28)
    assert torch.equal(batch_format.to_model_input(normalised), normalised)
    with pytest.raises(ValueError) as info:
        batch_format.to_model_input(np.zeros((2, 3, 32, 32), dtype=np.uint8))
    assert "28, 28" in str(info.value)


@pytest.mark.parametrize(
    ("pool", "gpus", "share"),
    [(2, 0, 0.0), (2, 1, 0.5), (2, 2, 1.0), (2, 4, 1.0), (3, 1, 1 / 3), (4, 2, 0.5), (1, 1, 1.0)],
)
def test_pool_actors_share_gpus_when_there_are_fewer_than_actors(pool, gpus, share):
    assert inference.gpu_share(pool, gpus) == pytest.approx(share)
    assert pool * inference.gpu_share(pool, gpus) <= max(gpus, 0) + 1e-9


def _plan(pool=2, cpus=1, *, total, free, nodes=None):
    return inference.plan_pool(pool, cpus, total=total, free=free, nodes=nodes or [total])


def test_a_pool_on_one_declared_gpu_shares_it_and_starts_with_what_is_free():
    """Lesson 05 on one GPU: the model actor freed, both pool actors fit on half a GPU each."""
    plan = _plan(total={"CPU": 4, "GPU": 1}, free={"CPU": 4, "GPU": 1})
    assert (plan.size, plan.num_cpus, plan.num_gpus) == (2, 1.0, 0.5)
    # Ray Data reserves 1 CPU for a GPU map itself, and warns ("experimental") when both are named.
    assert plan.actor_options() == {"num_gpus": 0.5} and plan.need() == {"CPU": 1.0, "GPU": 0.5}
    assert "1 GPU(s) shared by 2 actors" in plan.describe()
    # The model actor still holding the GPU (what hung on the H200): nothing fits, and the plan says so.
    held = _plan(total={"CPU": 4, "GPU": 1}, free={"CPU": 3, "GPU": 0})
    assert held.size == 0 and "none fits" in held.why


def test_a_pool_on_a_busy_cpu_cluster_is_sized_down_or_waits():
    """The workshop: 4 learners on 4 slots. A pool takes what is free, never asks for more."""
    assert _plan(total={"CPU": 4}, free={"CPU": 1}).size == 1
    one = _plan(total={"CPU": 4}, free={"CPU": 1})
    assert "1 instead of 2" in one.why and one.need() == {"CPU": 1.0}
    assert _plan(total={"CPU": 4}, free={"CPU": 0}).size == 0
    assert _plan(total={"CPU": 4}, free={"CPU": 4}).size == 2


def test_an_actor_that_could_never_fit_fails_at_once_in_one_sentence():
    from course_utils.core.session import ResourceError

    with pytest.raises(ResourceError) as info:
        _plan(cpus=8, total={"CPU": 8}, free={"CPU": 8}, nodes=[{"CPU": 4}, {"CPU": 4}])
    message = str(info.value)
    assert "needs 8 CPU" in message and "largest node of this cluster has 4 CPU" in message
    assert "\n" not in message


def test_pool_for_waits_in_line_until_one_actor_fits(monkeypatch, capsys):
    """Nothing free: one line while waiting, then the pool sized to what freed up."""
    readings = iter([{"CPU": 0.0}] * 3 + [{"CPU": 1.0}] * 10)
    now = {"free": {"CPU": 0.0}}

    def free():
        now["free"] = next(readings)
        return now["free"]

    real_plan = inference.plan_pool
    monkeypatch.setattr(
        inference,
        "plan_pool",
        lambda size, cpus: real_plan(size, cpus, total={"CPU": 4}, free=now["free"], nodes=[{"CPU": 4}]),
    )

    real_wait = progress.wait_for_free
    monkeypatch.setattr(
        progress,
        "wait_for_free",
        lambda need, what, poll_s: real_wait(
            need, what, 0.01, quiet_s=0, free=free, total=lambda: {"CPU": 4.0}
        ),
    )
    plan = inference.pool_for(2)
    err = capsys.readouterr().err
    assert plan.size == 1
    assert "waiting for 1 CPU slot: 0 of 4 free" in err and "this pool starts when they finish" in err


def test_accuracy_and_confusion_matrix():
    labels = np.array([0, 1, 2, 2, 9])
    preds = np.array([0, 1, 1, 2, 9])
    assert inference.accuracy(labels, preds) == pytest.approx(0.8)
    matrix = inference.confusion_counts(labels, preds)
    assert matrix.shape == (10, 10)
    assert matrix.sum() == 5 and matrix.trace() == 4
    assert matrix[2, 1] == 1  # a true 2 predicted as 1
    with pytest.raises(ValueError):
        inference.accuracy(labels, preds[:3])
    with pytest.raises(ValueError):
        inference.confusion_counts(labels, np.array([0, 1, 2, 2, 10]))


def test_model_worker_and_batch_predictor_agree_with_plain_pytorch(checkpoint_dir, mnist_root):
    images, labels = data.raw_arrays(train=False, size=64, root=mnist_root)
    expected = predict(load_model(checkpoint_dir), batch_format.to_model_input(images)).numpy()

    checkpoint = ray.train.Checkpoint.from_directory(str(checkpoint_dir))  # as lesson 05 hands it over
    worker = lesson_inference.ModelWorker(checkpoint)  # the actor's class, run in-process
    assert np.array_equal(worker.predict(images), expected)
    one_by_one = [int(worker.predict(x)[0]) for x in images[:8]]
    assert one_by_one == list(expected[:8])
    assert worker.info()["predict_calls"] == 9 and worker.info()["device"] == "cpu"

    predictor = BatchPredictor(checkpoint)
    out = predictor({"image": images, "label": labels})
    assert set(out) == {"prediction", "label"}
    assert np.array_equal(out["prediction"], expected)
    assert np.array_equal(out["label"], labels)


def test_throughput_lines_end_with_the_ratio():
    t = inference_timing.Throughput(
        per_image_images=100,
        per_image_seconds=1.0,
        batch=inference_timing.BatchTiming(10_000, 5.0, 1.0, 2500.0),
    )
    assert t.per_image_rate == 100 and t.batch_rate == 2000 and t.ratio == pytest.approx(20)
    lines = t.lines()
    assert all(": " in line for line in lines)
    assert "batch_startup_seconds: 1.00" in lines and "batch_images_per_s: 2000.0" in lines
    assert lines[-1] == "batch_vs_per_image_ratio: 20.0"


def test_throughput_with_plain_pytorch_ends_with_both_ratios():
    t = inference_timing.Throughput(
        per_image_images=100,
        per_image_seconds=1.0,
        batch=inference_timing.BatchTiming(10_000, 5.0, 1.0, 2500.0),
        plain_images=10_000,
        plain_seconds=4.0,
        plain_threads=2,
    )
    assert t.plain_rate == 2500 and t.plain_ratio == pytest.approx(0.8)
    lines = t.lines()
    assert lines[-2:] == ["batch_vs_plain_torch_ratio: 0.80", "batch_vs_per_image_ratio: 20.0"]
    assert "plain_torch_images_per_s: 2500.0" in lines


def test_throughput_table_has_a_row_per_way_and_splits_batch_at_start_up():
    t = inference_timing.Throughput(
        per_image_images=100,
        per_image_seconds=1.0,
        batch=inference_timing.BatchTiming(10_000, 5.0, 1.0, 2250.0, first_batch_rows=1_000),
        plain_images=10_000,
        plain_seconds=4.0,
        plain_threads=2,
    )
    table = t.table()
    assert table["images/s"].tolist() == pytest.approx([2500, 100, 2000, 1000, 2250])
    assert table.index[0] == "plain PyTorch, no Ray (2 threads)"
    start_up, after = table.iloc[3], table.iloc[4]
    assert start_up["images"] + after["images"] == 10_000 and start_up["seconds"] + after["seconds"] == 5.0
    assert (
        len(inference_timing.Throughput(1, 1.0, inference_timing.BatchTiming(10, 1.0, 0.5, 10.0)).table())
        == 4
    ), "no plain PyTorch row when it was not run"


def test_plain_loop_predicts_like_the_eager_model(checkpoint_dir, mnist_root):
    images, _ = data.raw_arrays(train=False, size=40, root=mnist_root)
    expected = predict(load_model(checkpoint_dir), batch_format.to_model_input(images)).numpy()
    threads = torch.get_num_threads()
    got = inference_timing.plain_pytorch_predict(str(checkpoint_dir), images, batch_size=16, threads=1)
    assert np.array_equal(got, expected)  # 16 + 16 + 8: the short last batch too
    assert torch.get_num_threads() == threads  # the driver's setting is restored


def test_confusion_matrix_plot(tmp_path):
    from course_utils.core import plots

    matrix = inference.confusion_counts(np.arange(10).repeat(3), np.arange(10).repeat(3))
    fig = plots.confusion_matrix(matrix, title="test")
    fig.savefig(tmp_path / "cm.png")
    assert "100.0%" in fig.axes[0].get_title()


def test_wait_until_quiet_needs_two_idle_samples_in_a_row(monkeypatch):
    import psutil

    samples = iter([90.0, 10.0, 80.0, 5.0, 3.0, 1.0])
    calls = []

    def cpu_percent(interval):
        calls.append(interval)
        return next(samples)

    monkeypatch.setattr(psutil, "cpu_percent", cpu_percent)
    inference_timing.wait_until_quiet(busy_pct=25.0)
    assert len(calls) == 5  # 90 busy, 10 idle, 80 busy resets, then 5 and 3 idle


def test_wait_until_quiet_gives_up_after_its_timeout(monkeypatch):
    import psutil

    monkeypatch.setattr(psutil, "cpu_percent", lambda interval: time.sleep(0.01) or 100.0)
    waited = inference_timing.wait_until_quiet(timeout_s=0.1)
    assert 0.1 <= waited < 1.0


def test_where_the_model_actor_runs_says_why_a_reserved_gpu_is_not_used():
    base = {"pid": 7, "load_seconds": 1.0, "predict_calls": 0}
    assert inference.where_it_runs({**base, "device": "cpu", "ray_gpu_ids": []}) == (
        "the actor (pid 7) runs its model on cpu"
    )
    declared = inference.where_it_runs({**base, "device": "cpu", "ray_gpu_ids": ["0"]})
    assert "Ray reserved GPU 0" in declared and "declares a GPU this machine does not have" in declared
    real = inference.where_it_runs({**base, "device": "cuda", "ray_gpu_ids": ["1"]})
    assert real == "the actor (pid 7) runs its model on cuda (Ray reserved GPU 1 for it)"


def test_the_pool_says_what_was_free_when_it_was_sized():
    plan = inference.plan_pool(
        2, 1, total={"CPU": 4, "GPU": 1}, free={"CPU": 3, "GPU": 1}, nodes=[{"CPU": 4, "GPU": 1}]
    )
    assert plan.describe().endswith("(3 CPU, 1 GPU free)"), plan.describe()


def test_model_worker_info_outside_ray_starts_no_ray(checkpoint_dir):
    """info() asks Ray for its GPUs only inside Ray: ray.get_gpu_ids() would start a local Ray otherwise,
    which a later test in the same process then found running (and waited on for ever)."""
    import ray
    import ray.train

    if ray.is_initialized():
        pytest.skip("another test left Ray running in this process")
    info = lesson_inference.ModelWorker(ray.train.Checkpoint.from_directory(str(checkpoint_dir))).info()
    assert info["ray_gpu_ids"] == [] and not ray.is_initialized()


def test_actor_name_is_the_courses_and_refuses_one_lesson_06_would_not_find():
    made = inference.actor_name("model-worker")
    assert made.startswith(f"{config.ACTOR_PREFIX}model-worker-{os.getpid()}-")
    assert made != inference.actor_name("model-worker")  # unique per call
    assert inference.actor_name("model-worker", "course-mine") == "course-mine"
    with pytest.raises(ValueError, match="start with 'course-'"):
        inference.actor_name("model-worker", "mine")
