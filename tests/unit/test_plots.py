import matplotlib

matplotlib.use("Agg")

import pandas as pd  # noqa: E402
import torch  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from course_utils.core import plots  # noqa: E402


def test_sample_grid(mnist_root):
    from course_utils.core import data

    fig = plots.sample_grid(data.mnist(True, mnist_root), n=8, cols=4)
    assert isinstance(fig, Figure) and len(fig.axes) == 8


def test_loss_curves_with_and_without_accuracy():
    history = pd.DataFrame(
        {"epoch": [0, 1], "train_loss": [1.0, 0.5], "test_loss": [1.1, 0.6], "accuracy": [0.5, 0.8]}
    )
    assert len(plots.loss_curves(history).axes) == 2
    assert len(plots.loss_curves(history.drop(columns="accuracy")).axes) == 1


def test_prediction_grid_marks_wrong_in_red():
    fig = plots.prediction_grid(torch.zeros(3, 1, 28, 28), [1, 2, 3], [1, 0, 3], cols=3)
    colors = [ax.title.get_color() for ax in fig.axes[:3]]
    assert colors == ["green", "red", "green"]


def test_bars_labels_values():
    fig = plots.bars({"a": 10.0, "b": 2000.0}, "images/s", "t")
    assert [t.get_text() for t in fig.axes[0].texts] == ["10", "2,000"]


def _whole(ticks) -> bool:
    return all(float(t).is_integer() for t in ticks)


def test_epoch_axes_have_whole_number_ticks():
    history = pd.DataFrame(
        {
            "epoch": [0, 1, 2],
            "train_loss": [1.0, 0.5, 0.4],
            "test_loss": [1.1, 0.6, 0.5],
            "accuracy": [0.5, 0.8, 0.9],
        }
    )
    for ax in plots.loss_curves(history).axes:
        assert _whole(ax.get_xticks()), (
            f"{ax.get_ylabel()} axis ticks {list(ax.get_xticks())}: epoch 0.5 is not a thing"
        )
    rows = pd.DataFrame({"done": [1, 2, 3], "attempt": [1, 1, 2]})
    timeline = plots.attempt_timeline(rows, x="done", attempt="attempt", failures=[(1, 2.4, "crash")])
    assert _whole(timeline.axes[0].get_xticks())


def test_epoch_attempts_gives_each_start_epoch_its_lane():
    # lesson 04's retries: attempt 1 from epoch 0, the retry from 1, the manual restore from 2
    history = pd.DataFrame({"epoch": [0, 1, 2, 3], "start_epoch": [0, 1, 2, 2]})
    figure = plots.epoch_attempts(history, failures=[(1, 1.5, "crash 1")])
    labels = [tick.get_text() for tick in figure.axes[0].get_yticklabels()]
    assert labels == ["attempt 1", "attempt 2", "attempt 3"]
    assert figure.axes[0].get_xlabel() == "epochs completed"
