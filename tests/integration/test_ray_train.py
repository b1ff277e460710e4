"""The Ray Train loop on a local cluster: 2 CPU workers, tiny data."""

from pathlib import Path

import pytest
import torch
from ray.train import ScalingConfig

from course_utils.core import checkpoints, config, data, session, steps, training
from course_utils.core import storage as course_storage
from course_utils.core.history import metric_history
from course_utils.core.storage import resolve as resolve_storage
from course_utils.lesson_code import train_loop_per_worker

pytestmark = pytest.mark.integration

TINY = config.SMOKE.with_(epochs=2, train_size=512, test_size=200, batch_size=64)


def test_start_ray_twice_is_fine(ray_session):
    again = session.start_ray(verbose=False)
    assert again.address == ray_session.address and again.cpus >= 2


@pytest.fixture(scope="module")
def tiny_fit(ray_session, tmp_path_factory):
    """One 2-worker fit every test of the fit's outcome reads (a fit costs 20-40 s here), and the
    learner's folder in storage it wrote to."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("COURSE_STORAGE", str(tmp_path_factory.mktemp("storage")))
        learner = Path(course_storage.resolve().prepare())  # as the `storage` fixture returns it
        yield (
            training.make_trainer(
                "tiny-fit", TINY, store=resolve_storage(), train_loop=train_loop_per_worker
            ).fit(),
            learner,
        )


def test_two_workers_train_and_checkpoint_loads(tiny_fit):
    result, storage = tiny_fit
    history = metric_history(result)
    assert history["epoch"].tolist() == [0, 1]
    assert (history["world_size"] == 2).all()
    assert history["train_loss"].iloc[1] < history["train_loss"].iloc[0], "loss falls"
    assert result.checkpoint.path.startswith(str(storage))

    model = checkpoints.load_model(result.checkpoint)
    _, test_ds = data.course_datasets(TINY.train_size, TINY.test_size, seed=TINY.seed)
    scores = steps.evaluate(model, data.make_loader(test_ds, 100, shuffle=False), torch.device("cpu"))
    assert scores["accuracy"] == pytest.approx(history["accuracy"].iloc[-1], abs=1e-6), (
        "the fresh model loaded from the checkpoint scores exactly what the run reported"
    )


def test_the_checkpoint_holds_the_full_history(tiny_fit):
    result, _ = tiny_fit
    state = checkpoints.load_state(result.checkpoint)
    assert [row["epoch"] for row in state["history"]] == [0, 1] and state["epoch"] == 1
    assert metric_history(result)["epoch"].tolist() == [0, 1]


def test_too_many_workers_fail_before_training(ray_session, storage):
    with pytest.raises(session.ResourceError) as info:
        training.make_trainer(
            "never-runs", TINY, num_workers=8, store=resolve_storage(), train_loop=train_loop_per_worker
        )
    assert "8 worker(s)" in str(info.value)
    assert not storage.joinpath("never-runs").exists()


def test_uneven_global_batch_fails_before_training(ray_session, storage):
    with pytest.raises(ValueError) as info:
        training.make_trainer(
            "never-runs",
            TINY.with_(batch_size=100),
            num_workers=3,
            store=resolve_storage(),
            train_loop=train_loop_per_worker,
        )
    assert "does not split evenly across 3 workers" in str(info.value)


def test_gpu_request_fails_before_training(ray_session):
    if ray_session.gpus:
        pytest.skip("this machine has GPUs")
    with pytest.raises(session.ResourceError, match="GPU"):
        session.check_resources(ScalingConfig(num_workers=1, use_gpu=True))
