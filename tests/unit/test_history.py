import pytest
import torch

from course_utils.core import checkpoints
from course_utils.core.history import metric_history


class _Result:
    def __init__(self, checkpoint):
        self.checkpoint = checkpoint


def test_metric_history_from_dir_and_result(tmp_path):
    rows = [{"epoch": e, "accuracy": 0.5 + e / 10} for e in range(3)]
    directory = checkpoints.write_checkpoint_dir({"model": {}, "history": rows}, tmp_path)
    assert metric_history(directory)["epoch"].tolist() == [0, 1, 2]
    assert metric_history(_Result(directory))["accuracy"].iloc[-1] == pytest.approx(0.7)


def test_metric_history_from_the_history_a_lessons_loop_saves_in_state_pt(tmp_path):
    # the lessons' loops save {"model": ..., "history": [...]} with torch.save alone, no history.json
    rows = [{"epoch": e, "accuracy": 0.5 + e / 10} for e in range(2)]
    torch.save({"model": {}, "epoch": 1, "history": rows}, tmp_path / checkpoints.STATE_FILE)
    assert metric_history(tmp_path)["accuracy"].tolist() == pytest.approx([0.5, 0.6])


def test_run_without_checkpoint_is_a_clear_error():
    with pytest.raises(checkpoints.CheckpointError, match="no checkpoint"):
        metric_history(_Result(None))


def test_checkpoint_without_history_is_a_clear_error(tmp_path):
    with pytest.raises(checkpoints.CheckpointError, match="history.json"):
        metric_history(tmp_path)
    torch.save({"model": {}}, tmp_path / checkpoints.STATE_FILE)
    with pytest.raises(checkpoints.CheckpointError, match="nor a history in state.pt"):
        metric_history(tmp_path)


class _RunContext:
    def __init__(self, storage_path, name):
        from ray.train import RunConfig

        self.config = RunConfig(name=name, storage_path=str(storage_path))

    def get_run_config(self):
        return self.config


class _Checkpoint:
    def __init__(self, path):
        self.path = path


def _report(log, context, epoch, checkpoint=True):
    metrics = [{"epoch": epoch, "accuracy": 0.5 + epoch / 10}, {"epoch": epoch, "accuracy": 0.0}]
    log.after_report(context, metrics, _Checkpoint(f"/x/checkpoint_{epoch}") if checkpoint else None)


def test_report_log_keeps_every_report_and_a_restored_run_continues_it(tmp_path):
    import pyarrow.fs as pafs

    from course_utils.core.history import ReportLog, read_reports

    context = _RunContext(tmp_path, "run")
    first = ReportLog()
    _report(first, context, 0)
    _report(first, context, 1, checkpoint=False)  # a report without a checkpoint is kept too
    restored = ReportLog()  # a new trainer with the same name (a manual restore), on a new controller
    _report(restored, context, 2)
    rows = read_reports(pafs.LocalFileSystem(), f"{tmp_path}/run")
    assert [r["epoch"] for r in rows] == [0, 1, 2]
    assert [r["accuracy"] for r in rows] == [0.5, 0.6, 0.7]  # rank 0's metrics
    assert [r["checkpoint"] for r in rows] == ["checkpoint_0", None, "checkpoint_2"]
    assert not (tmp_path / "run" / "reports.json.partial").exists()

    class Result:  # what fit() returns: the run folder and its filesystem, and the latest checkpoint
        path, filesystem, checkpoint = f"{tmp_path}/run", pafs.LocalFileSystem(), None

    frame = metric_history(Result())
    assert frame["epoch"].tolist() == [0, 1, 2] and "reported_at" not in frame


def test_fit_progress_follows_the_log_and_needs_the_callback(tmp_path):
    from ray.train import RunConfig, ScalingConfig

    from course_utils.core.history import ReportLog
    from course_utils.core.progress import fit_progress

    class Trainer:
        run_config = RunConfig(name="run", storage_path=str(tmp_path), callbacks=[ReportLog()])
        scaling_config = ScalingConfig(num_workers=2)

    log = ReportLog()
    context = _RunContext(tmp_path, "run")
    _report(log, context, 0)  # an earlier trainer's report: the bar starts after it
    with fit_progress(Trainer(), total=3, every_s=0.05) as bar:
        assert bar.n == 1 and bar.desc == "run (resumed after 1 report(s))"
        _report(log, context, 1)
        _report(log, context, 2)
    assert bar.n == 3 and bar.postfix and "accuracy=0.7" in bar.postfix

    with pytest.raises(RuntimeError, match="a rank failed"):
        with fit_progress(Trainer(), total=5, every_s=0.05) as stopped:
            raise RuntimeError("a rank failed")
    assert stopped.desc == "run (resumed after 3 report(s)) (stopped: fit() raised)" and stopped.n == 3, (
        "short of 5, and says why"
    )

    class Bare:
        run_config = RunConfig(name="run", storage_path=str(tmp_path))
        scaling_config = ScalingConfig(num_workers=2)

    with pytest.raises(ValueError, match="ReportLog"):
        with fit_progress(Bare()):
            pass


def test_fit_progress_samples_every_node_on_request(tmp_path, monkeypatch):
    """``utilization=True``: one call gives the bar and the node sampling lesson 02 plots, which runs for
    exactly the block (the fit) and is named after the run."""
    import contextlib

    from ray.train import RunConfig, ScalingConfig

    from course_utils.core.history import ReportLog
    from course_utils.core.progress import fit_progress
    from course_utils.internals import metrics

    class Trainer:
        run_config = RunConfig(name="run", storage_path=str(tmp_path), callbacks=[ReportLog()])
        scaling_config = ScalingConfig(num_workers=2)

    events = []

    @contextlib.contextmanager
    def sampling(run_name=None, **kwargs):
        events.append(("start", run_name))
        yield "the samples"
        events.append(("stop", run_name))

    monkeypatch.setattr(metrics, "sample_metrics", sampling)
    with fit_progress(Trainer(), total=1, every_s=0.05) as plain:
        pass
    assert events == [] and not hasattr(plain, "utilization"), "off unless asked"
    with fit_progress(Trainer(), total=1, every_s=0.05, utilization=True) as bar:
        events.append(("fit", None))
    assert bar.utilization == "the samples"
    assert events == [("start", "run"), ("fit", None), ("stop", "run")]


def test_read_reports_reads_again_when_the_file_was_replaced_mid_read(tmp_path):
    """On S3 a reader can get a cut-off read of the file ReportLog just replaced (seen in CI's workshop
    run: "Expecting value: line 14 column 1"); it reads again instead of failing. Text that stays
    broken is still an error."""
    import io
    import json

    import pyarrow.fs as pafs
    import pytest

    from course_utils.core.history import read_reports

    whole = json.dumps([{"epoch": 0}, {"epoch": 1}], indent=1)
    reads = [whole[: len(whole) // 2], whole]

    class Replacing:  # a filesystem with only what read_reports calls
        def get_file_info(self, path):
            return pafs.FileInfo(path, pafs.FileType.File)

        def open_input_stream(self, path):
            return io.BytesIO((reads.pop(0) if len(reads) > 1 else reads[0]).encode())

    fs = Replacing()
    assert read_reports(fs, "run", pause_s=0) == [{"epoch": 0}, {"epoch": 1}]
    reads[:] = ["[{", "[{"]
    with pytest.raises(json.JSONDecodeError):
        read_reports(fs, "run", attempts=3, pause_s=0)
