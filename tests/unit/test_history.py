import pytest

from course_utils import checkpoints
from course_utils.history import metric_history


class _Result:
    def __init__(self, checkpoint):
        self.checkpoint = checkpoint


def test_metric_history_from_dir_and_result(tmp_path):
    rows = [{"epoch": e, "accuracy": 0.5 + e / 10} for e in range(3)]
    directory = checkpoints.write_checkpoint_dir({"model": {}, "history": rows}, tmp_path)
    assert metric_history(directory)["epoch"].tolist() == [0, 1, 2]
    assert metric_history(_Result(directory))["accuracy"].iloc[-1] == pytest.approx(0.7)


def test_run_without_checkpoint_is_a_clear_error():
    with pytest.raises(checkpoints.CheckpointError, match="no checkpoint"):
        metric_history(_Result(None))


def test_checkpoint_without_history_is_a_clear_error(tmp_path):
    with pytest.raises(checkpoints.CheckpointError, match="history.json"):
        metric_history(tmp_path)
