"""Unit tests for course_utils.inference: input handling, scoring maths, the actor classes in-process."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch

from course_utils import data, inference
from course_utils.checkpoints import load_model
from course_utils.model import predict


@pytest.fixture(scope="module")
def checkpoint_dir(tmp_path_factory):
    return inference.placeholder_checkpoint(tmp_path_factory.mktemp("ckpt"))


def test_to_model_input_matches_the_training_transform(mnist_root):
    images, _ = data.raw_arrays(train=False, size=4, root=mnist_root)
    expected = torch.stack([data.TRANSFORM(img.numpy() if hasattr(img, "numpy") else img) for img in images])
    got = inference.to_model_input(images)
    assert got.shape == (4, 1, 28, 28)
    assert torch.allclose(got, expected, atol=1e-6)


def test_to_model_input_shapes_and_read_only_arrays():
    one = np.zeros((28, 28), dtype=np.uint8)
    assert inference.to_model_input(one).shape == (1, 1, 28, 28)
    read_only = np.zeros((3, 28, 28), dtype=np.uint8)
    read_only.setflags(write=False)  # what Ray hands an actor
    assert inference.to_model_input(read_only).shape == (3, 1, 28, 28)
    normalised = torch.randn(2, 1, 28, 28)
    assert torch.equal(inference.to_model_input(normalised), normalised)
    with pytest.raises(ValueError) as info:
        inference.to_model_input(np.zeros((2, 3, 32, 32), dtype=np.uint8))
    assert "28, 28" in str(info.value)


def test_model_worker_options_ask_for_a_gpu_only_when_told_there_is_one():
    assert inference.model_worker_options(use_gpu=False) == {"num_cpus": 1}
    assert inference.model_worker_options(use_gpu=True) == {"num_cpus": 1, "num_gpus": 1}


def test_accuracy_and_confusion_matrix():
    labels = np.array([0, 1, 2, 2, 9])
    preds = np.array([0, 1, 1, 2, 9])
    assert inference.accuracy(labels, preds) == pytest.approx(0.8)
    matrix = inference.confusion_matrix(labels, preds)
    assert matrix.shape == (10, 10)
    assert matrix.sum() == 5 and matrix.trace() == 4
    assert matrix[2, 1] == 1  # a true 2 predicted as 1
    with pytest.raises(ValueError):
        inference.accuracy(labels, preds[:3])
    with pytest.raises(ValueError):
        inference.confusion_matrix(labels, np.array([0, 1, 2, 2, 10]))


def test_model_worker_and_batch_predictor_agree_with_plain_pytorch(checkpoint_dir, mnist_root):
    images, labels = data.raw_arrays(train=False, size=64, root=mnist_root)
    expected = predict(load_model(checkpoint_dir), inference.to_model_input(images)).numpy()

    worker = inference.ModelWorker(str(checkpoint_dir))  # the actor's class, run in-process
    assert np.array_equal(worker.predict(images), expected)
    one_by_one = [int(worker.predict(x)[0]) for x in images[:8]]
    assert one_by_one == list(expected[:8])
    assert worker.info()["predict_calls"] == 9 and worker.info()["device"] == "cpu"

    predictor = inference.BatchPredictor(inference.torchscript_bytes(str(checkpoint_dir)))
    out = predictor({"image": images, "label": labels})
    assert set(out) == {"prediction", "label"}
    assert np.array_equal(out["prediction"], expected)
    assert np.array_equal(out["label"], labels)


def test_throughput_lines_end_with_the_ratio():
    t = inference.Throughput(
        per_image_images=100, per_image_seconds=1.0, batch=inference.BatchTiming(10_000, 5.0, 1.0, 2500.0)
    )
    assert t.per_image_rate == 100 and t.batch_rate == 2000 and t.ratio == pytest.approx(20)
    lines = t.lines()
    assert all(": " in line for line in lines)
    assert "batch_startup_seconds: 1.00" in lines and "batch_images_per_s: 2000.0" in lines
    assert lines[-1] == "batch_vs_per_image_ratio: 20.0"


def test_throughput_with_plain_pytorch_ends_with_both_ratios():
    t = inference.Throughput(
        per_image_images=100,
        per_image_seconds=1.0,
        batch=inference.BatchTiming(10_000, 5.0, 1.0, 2500.0),
        plain_images=10_000,
        plain_seconds=4.0,
        plain_threads=2,
    )
    assert t.plain_rate == 2500 and t.plain_ratio == pytest.approx(0.8)
    lines = t.lines()
    assert lines[-2:] == ["batch_vs_plain_torch_ratio: 0.80", "batch_vs_per_image_ratio: 20.0"]
    assert "plain_torch_images_per_s: 2500.0" in lines


def test_torchscript_model_and_plain_loop_predict_like_the_eager_model(checkpoint_dir, mnist_root):
    images, _ = data.raw_arrays(train=False, size=40, root=mnist_root)
    model = load_model(checkpoint_dir)
    expected = predict(model, inference.to_model_input(images)).numpy()
    blob = inference.torchscript_bytes(str(checkpoint_dir))
    fast = inference.load_torchscript(blob, torch.device("cpu"))
    assert isinstance(fast, torch.jit.ScriptModule)  # frozen and fused, not the eager model
    with torch.inference_mode():  # traced on 2 digits, used on 40: any batch size works
        assert np.array_equal(fast(inference.to_model_input(images)).argmax(dim=1).numpy(), expected)
    threads = torch.get_num_threads()
    got = inference.plain_pytorch_predict(str(checkpoint_dir), images, batch_size=16, threads=1)
    assert np.array_equal(got, expected)  # 16 + 16 + 8: the short last batch too
    assert torch.get_num_threads() == threads  # the driver's setting is restored


def test_confusion_matrix_plot(tmp_path):
    from course_utils import plots

    matrix = inference.confusion_matrix(np.arange(10).repeat(3), np.arange(10).repeat(3))
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
    inference.wait_until_quiet(busy_pct=25.0)
    assert len(calls) == 5  # 90 busy, 10 idle, 80 busy resets, then 5 and 3 idle


def test_wait_until_quiet_gives_up_after_its_timeout(monkeypatch):
    import psutil

    monkeypatch.setattr(psutil, "cpu_percent", lambda interval: time.sleep(0.01) or 100.0)
    waited = inference.wait_until_quiet(timeout_s=0.1)
    assert 0.1 <= waited < 1.0
