"""Checkpoints in S3: train against a real S3-API server (moto) on loopback, kill the run, resume.

Ray Train writes each checkpoint locally first and uploads it through the ``S3FileSystem`` that
``storage.ray_storage()`` hands to ``RunConfig``; the resumed run must find them in the bucket.
"""

import pyarrow.fs as pafs
import pytest
from ray.train import TrainingFailedError

from course_utils import config, faults, lesson_code, training
from course_utils import storage as course_storage
from course_utils.history import metric_history
from course_utils.steps import REPORTED_METRICS
from tests.notebook_runs import S3

pytestmark = [pytest.mark.integration, pytest.mark.path(S3)]

TINY = config.SMOKE.with_(epochs=3, train_size=512, test_size=200, batch_size=64)
LOOP = (
    lesson_code.train_loop_resumable
)  # lesson 04's loop: resumes from get_checkpoint(), reports start_epoch
# What train_loop_resumable reports each epoch: lesson 02's metrics, where the attempt began and
# the batch each worker trained with.
REPORTED = (*REPORTED_METRICS, "start_epoch", "per_worker_batch")


def test_checkpoints_in_s3_survive_a_killed_run_and_resume(ray_session, s3_storage, tmp_path):
    name = "s3-resume"
    # Rank 1 dies in epoch 1, seconds after epoch 0's checkpoint was reported (Ray registers a
    # checkpoint only when its controller next polls the workers), and no retry is allowed.
    fault = faults.crash_once(tmp_path / "marker", rank=1, epoch=1, step=1, how="kill", delay_s=6)
    with pytest.raises(TrainingFailedError):
        training.make_trainer(
            name, TINY, max_failures=0, train_loop=LOOP, reported_metrics=REPORTED, fault=fault
        ).fit()

    path, fs = course_storage.ray_storage()
    assert isinstance(fs, pafs.S3FileSystem)
    assert path == f"{s3_storage.removeprefix('s3://')}/{config.learner_folder()}"  # the learner's folder
    saved = course_storage.check_run(name)  # reads the snapshot and loads each checkpoint from S3
    in_bucket = fs.get_file_info(pafs.FileSelector(f"{path}/{name}/{saved['latest']}"))
    assert faults.fired(fault)
    assert saved["latest_metrics"]["epoch"] == 0, "the killed run left epoch 0's checkpoint"
    assert {f.base_name for f in in_bucket} >= {"state.pt", "history.json"}, "checkpoint files are in S3"

    result = training.make_trainer(
        name, TINY, max_failures=0, train_loop=LOOP, reported_metrics=REPORTED
    ).fit()
    history = metric_history(result)
    assert history["epoch"].tolist() == [0, 1, 2]
    assert history["start_epoch"].tolist() == [0, 1, 1], "the new trainer resumed at epoch 1 from S3"
    assert result.checkpoint.path.startswith(f"{path}/{name}/checkpoint_")
    assert isinstance(result.checkpoint.filesystem, pafs.S3FileSystem)
    assert course_storage.result_from_run(name).checkpoint is not None
