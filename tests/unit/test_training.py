import pytest
import torch

from course_utils import lesson_code
from course_utils.core import compare, config, data, plan, steps, training
from course_utils.core.model import build_resnet18
from course_utils.core.storage import Storage


def test_per_worker_batch_splits_evenly():
    assert plan.per_worker_batch(128, 2) == 64
    assert plan.per_worker_batch(128, 1) == 128


def test_per_worker_batch_uneven_is_a_clear_error():
    with pytest.raises(ValueError) as info:
        plan.per_worker_batch(100, 3)
    message = str(info.value)
    assert "100" in message and "3 workers" in message and "99 or 102" in message


def test_per_worker_batch_rejects_nonsense():
    with pytest.raises(ValueError):
        plan.per_worker_batch(128, 0)


def test_train_one_epoch_lowers_loss_and_evaluate_scores(mnist_root):
    torch.manual_seed(0)
    ds = data.take(data.mnist(True, mnist_root), 256)
    loader = data.make_loader(ds, 64, shuffle=True)
    model = build_resnet18()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    first, images = steps.train_one_epoch(model, loader, optimizer, torch.device("cpu"))
    second, _ = steps.train_one_epoch(model, loader, optimizer, torch.device("cpu"))
    assert images == 256, "counts every image it trained on"
    assert second < first
    scores = steps.evaluate(model, data.make_loader(ds, 128, shuffle=False), torch.device("cpu"))
    assert set(scores) == {"test_loss", "accuracy"} and 0.0 <= scores["accuracy"] <= 1.0


def test_lesson_01s_loop_writes_metrics_and_model(mnist_root, tmp_path):
    profile = config.SMOKE.with_(epochs=2, train_size=256, test_size=64, batch_size=64)
    store = Storage(str(tmp_path), "unit")
    output = store.local_output_dir(compare.LESSON01_OUTPUT)  # where lesson 01 writes it
    rows = lesson_code.train_baseline(training.loop_config(profile, data_root=str(mnist_root)), str(output))
    assert [row["epoch"] for row in rows] == [0, 1]
    assert rows[1]["train_loss"] < rows[0]["train_loss"]
    written = compare.lesson01_history(store)  # how lessons 02 and 03 read it back
    assert written is not None and written["accuracy"].tolist() == [row["accuracy"] for row in rows]
    assert torch.load(output / "model.pt", weights_only=True).keys() == build_resnet18().state_dict().keys()


def test_loop_config_has_absolute_data_root(mnist_root):
    cfg = training.loop_config(config.SMOKE, epochs=1)
    assert cfg["epochs"] == 1 and cfg["batch_size"] == config.SMOKE.batch_size
    assert cfg["data_root"].startswith("/")


def test_sum_across_workers_is_the_value_itself_with_one_process():
    assert steps.sum_across_workers([3.5, 2], torch.device("cpu")) == [3.5, 2.0]
