"""Lesson 04 on a real local Ray: faults are injected, the runs must survive them exactly. What lesson 04's
self-checks assert already (the exhausted retries and the restore by name, a rank SIGKILLed from outside)
is the lesson's; these assert what it does not show (bitwise resumes, torn and corrupted checkpoints).

Fits are shared between tests where one run honestly proves several things (each fit costs
20-40 s here); every shared run is built by a module-scoped fixture, and each test asserts
one property of it.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from course_utils import lesson_code
from course_utils.core import checkpoints, history, training
from course_utils.core import storage as runs
from course_utils.core.config import get_profile
from course_utils.core.storage import resolve as resolve_storage
from course_utils.lesson04 import faults, resumable
from maintainer_tools import fits

pytestmark = pytest.mark.integration

# 1,024 digits, global batch 128 on 2 workers: 8 steps of 64 per rank and epoch.
SMALL = dict(train_size=1024, test_size=256)
# Ray Train registers a reported checkpoint when its controller next polls the workers: a crash
# within about a second of report() can lose that checkpoint. Faults wait this long first, so
# "resumed at the last checkpointed epoch + 1" is deterministic.
SETTLE_S = 2.0


@pytest.fixture(scope="module")
def shared_storage(tmp_path_factory, ray_session):
    """One COURSE_STORAGE for the module's shared runs; the learner's folder in it (where runs go)."""

    path = tmp_path_factory.mktemp("ft-storage")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("COURSE_STORAGE", str(path))
        mp.setenv("COURSE_PROFILE", "smoke")
        yield Path(runs.resolve().prepare())


def _profile(epochs: int):
    return get_profile("smoke").with_(epochs=epochs, **SMALL)


def _trainer(name: str, profile, **kwargs):
    """``training.make_trainer`` with lesson 04's resumable loop (restores, reports start_epoch, faults)."""
    return training.make_trainer(
        name, profile, store=resolve_storage(), train_loop=lesson_code.train_loop_resumable, **kwargs
    )


def _weights(result) -> dict[str, torch.Tensor]:
    return checkpoints.load_state(result.checkpoint)["model"]


@pytest.fixture(scope="module")
def epoch_runs(shared_storage):
    """An uninterrupted 2-epoch run and the same run with rank 1 crashing mid-epoch 1 once."""
    profile = _profile(2)
    clean = _trainer("ft-clean", profile, max_failures=0).fit()
    spec = faults.crash_once(shared_storage / "markers" / "inloop", rank=1, epoch=1, step=5, delay_s=SETTLE_S)
    crashed = _trainer("ft-crashed", profile, max_failures=1, fault=spec).fit()
    return {"clean": clean, "crashed": crashed, "spec": spec}


def test_in_loop_crash_restarts_once_and_resumes_at_next_epoch(epoch_runs):
    rows = history.metric_history(epoch_runs["crashed"])
    assert faults.fired(epoch_runs["spec"])
    assert rows["epoch"].tolist() == [0, 1]  # all epochs, none twice
    # attempt 1 ran epoch 0 from a fresh start; attempt 2 started at the checkpointed epoch 0 + 1.
    # max_failures=1 and fit() returned, so there was at most one restart; the marker proves one.
    assert rows["start_epoch"].tolist() == [0, 1]


def test_resume_at_epoch_boundary_is_bitwise_exact(epoch_runs):
    clean, crashed = _weights(epoch_runs["clean"]), _weights(epoch_runs["crashed"])
    assert clean.keys() == crashed.keys()
    different = [k for k in clean if not torch.equal(clean[k], crashed[k])]
    assert different == []


@pytest.fixture(scope="module")
def mid_epoch_run(shared_storage):
    """Mid-epoch checkpoints every 3 steps, uploaded asynchronously; a crash at epoch 0 step 7 and a
    SIGKILL of rank 0 as it starts writing the checkpoint after epoch 1 step 6 (an earlier save may still
    be uploading on Ray's thread)."""
    markers = shared_storage / "markers"
    specs = [
        faults.crash_once(markers / "mid", rank=1, epoch=0, step=7, delay_s=SETTLE_S),
        faults.crash_once(
            markers / "write", rank=0, epoch=1, step=6, how="kill", during="checkpoint", delay_s=SETTLE_S
        ),
    ]
    trainer = fits.make_trainer_mid_epoch(
        "ft-mid-epoch",
        _profile(2),
        max_failures=2,
        num_to_keep=3,
        checkpoint_every=3,
        checkpoint_uploads=["async"],
        fault=faults.planted(*specs),
    )
    result = trainer.fit()
    return {"result": result, "state": checkpoints.load_state(result.checkpoint), "specs": specs}


def test_mid_epoch_resume_ends_with_the_uninterrupted_weights(mid_epoch_run, epoch_runs):
    state = mid_epoch_run["state"]
    starts = resumable.attempts(state["history"])[["start_epoch", "start_step"]].values.tolist()
    assert all(faults.fired(s) for s in mid_epoch_run["specs"])
    # crash at step 7 after the step-6 checkpoint -> resume at exactly (0, 6); the kill while writing the
    # (1, 6) checkpoint -> Ray never had it -> resume at (1, 3), the last uploaded.
    assert starts == [[0, 0], [0, 6], [1, 3]]
    # Section 03's loop, uninterrupted, on the same digits, seed and 2 workers: the same weights bit for
    # bit only if the resumed attempts trained every sample once, in the uninterrupted order.
    clean = _weights(epoch_runs["clean"])
    different = [k for k in clean if not torch.equal(clean[k], state["model"][k])]
    assert clean.keys() == state["model"].keys() and different == []


def test_crash_while_writing_a_checkpoint_leaves_only_loadable_ones(mid_epoch_run, shared_storage):
    info = runs.resolve().check_run("ft-mid-epoch")  # every checkpoint the snapshot lists exists and loads
    run_dir = Path(shared_storage) / "ft-mid-epoch"
    partial = list(run_dir.rglob("*.partial"))
    assert info is not None and len(info["checkpoints"]) == 3
    assert partial == []
    assert all(checkpoints.load_state(run_dir / name)["epoch"] in (0, 1) for name in info["checkpoints"])


@pytest.mark.parametrize("damage", ["truncated snapshot", "deleted checkpoint", "no snapshot"])
def test_corrupted_run_fails_clearly_instead_of_starting_fresh(epoch_runs, shared_storage, damage):
    source = Path(shared_storage) / "ft-clean"
    name = "ft-damaged-" + damage.replace(" ", "-")
    target = Path(shared_storage) / name
    shutil.copytree(source, target)
    snapshot = target / runs.SNAPSHOT_FILE
    if damage == "truncated snapshot":
        snapshot.write_text(snapshot.read_text()[:200])
    elif damage == "deleted checkpoint":
        shutil.rmtree(target / runs.resolve().check_run("ft-clean")["latest"])
    else:
        snapshot.unlink()
    with pytest.raises(runs.RunCorruptedError) as err:
        training.make_trainer(
            name, _profile(2), store=resolve_storage(), train_loop=lesson_code.train_loop_per_worker
        )  # the preflight runs before any worker starts
    assert name in str(err.value) and "reset_run" in str(err.value)


def test_bad_configs_fail_clearly(ray_session, storage):
    from ray.train import CheckpointConfig

    from course_utils.core.session import worker_count_bounds

    with pytest.raises(ValueError) as elastic:
        training.make_trainer(
            "ft-bad",
            _profile(1),
            num_workers=(4, 2),
            store=resolve_storage(),
            train_loop=lesson_code.train_loop_per_worker,
        )
    with pytest.raises(ValueError) as bounds:
        worker_count_bounds((4, 2))
    with pytest.raises(ValueError) as keep:
        CheckpointConfig(num_to_keep=0)
    with pytest.raises(ValueError) as keep_course:
        training.make_trainer(
            "ft-bad",
            _profile(1),
            num_to_keep=0,
            store=resolve_storage(),
            train_loop=lesson_code.train_loop_per_worker,
        )
    with pytest.raises(ValueError) as score:
        training.make_trainer(
            "ft-bad",
            _profile(1),
            score_attribute="val_accuracy",
            store=resolve_storage(),
            train_loop=lesson_code.train_loop_per_worker,
        )
    assert "min_workers=4 must be <= max_workers=2" in str(elastic.value)  # Ray's ScalingConfig
    assert "1 <= min <= max" in str(bounds.value)  # the course's own check, for raw tuples
    assert "num_to_keep" in str(keep.value) and "num_to_keep" in str(keep_course.value)
    assert "val_accuracy" in str(score.value) and "accuracy" in str(score.value)
    assert not runs.resolve().run_exists("ft-bad")  # nothing started
