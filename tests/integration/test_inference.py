"""Lesson 05/06 on a local Ray: the ModelWorker actor, Ray Data batch inference, killing course actors."""

from __future__ import annotations

import numpy as np
import pytest

from course_utils.core import batch_format, data
from course_utils.core.checkpoints import load_model
from course_utils.core.model import predict
from course_utils.core.storage import resolve as resolve_storage
from course_utils.lesson05 import inference, inference_timing
from course_utils.lesson06 import cleanup
from course_utils.lesson_inference import BatchPredictor, batch_predict, start_model_worker

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def checkpoint_dir(tmp_path_factory):
    import ray.train

    # as lesson 05 hands it over: a ray.train.Checkpoint
    return ray.train.Checkpoint.from_directory(
        str(inference.placeholder_checkpoint(resolve_storage(), tmp_path_factory.mktemp("ckpt")))
    )


@pytest.fixture(scope="module")
def digits(mnist_root):
    images, labels = data.raw_arrays(train=False, size=200, root=mnist_root)
    return images, labels


def _expected(checkpoint_dir, images):
    return predict(load_model(checkpoint_dir), batch_format.to_model_input(images)).numpy()


def test_model_worker_actor_serves_the_checkpoint(ray_session, checkpoint_dir, digits):
    import ray

    images, _ = digits
    worker = start_model_worker(checkpoint_dir)
    try:
        info = ray.get(worker.info.remote())
        one_by_one = inference_timing.predict_one_by_one(worker, images[:20], progress=False)
        whole = ray.get(worker.predict.remote(images))
        calls = ray.get(worker.info.remote())["predict_calls"]
    finally:
        ray.kill(worker, no_restart=True)
    expected = _expected(checkpoint_dir, images)
    assert info["device"] == "cpu" and info["predict_calls"] == 0
    assert np.array_equal(one_by_one, expected[:20])
    assert np.array_equal(whole, expected)
    assert calls == 21  # loaded once, then one call per image plus the batch


def test_batch_inference_with_an_actor_pool_scores_every_digit(ray_session, checkpoint_dir, digits):
    images, labels = digits
    ds = inference.images_dataset(images, labels, blocks=4)
    pool = inference.pool_for(2)
    got_labels, got_predictions = inference.collect_predictions(
        batch_predict(
            ds, checkpoint_dir, BatchPredictor, pool_size=pool.size, batch_size=64, **pool.actor_options()
        )
    )
    expected = _expected(checkpoint_dir, images)
    assert len(got_predictions) == len(images)
    # Row order across blocks is not promised: compare the multisets of (label, prediction) pairs.
    pairs = sorted(zip(got_labels.tolist(), got_predictions.tolist(), strict=True))
    assert pairs == sorted(zip(labels.tolist(), expected.tolist(), strict=True))
    acc = inference.accuracy(got_labels, got_predictions)
    assert acc == pytest.approx(inference.accuracy(labels, expected))


def test_measure_throughput_runs_both_ways(ray_session, checkpoint_dir, digits):
    images, _ = digits
    result = inference_timing.measure_throughput(
        checkpoint_dir,
        images,
        BatchPredictor,
        batch_predict,
        start_model_worker,
        per_image=10,
        progress=False,
    )
    assert result.per_image_images == 10 and result.batch.images == len(images)
    assert result.per_image_seconds > 0 and result.batch.seconds > 0
    assert result.plain_images == len(images) and result.plain_seconds > 0
    assert result.lines()[-2].startswith("batch_vs_plain_torch_ratio: ")
    assert result.lines()[-1].startswith("batch_vs_per_image_ratio: ")
    assert cleanup.course_actors() == []  # its own worker was killed


def test_kill_course_actors_leaves_none_alive(ray_session, checkpoint_dir):
    import ray

    # named as lesson 05 names its actor: how cleanup finds them
    workers = [
        start_model_worker(checkpoint_dir, name=inference.actor_name("model-worker")) for _ in range(2)
    ]
    ray.get([w.info.remote() for w in workers])
    assert len(cleanup.course_actors()) == 2
    killed = cleanup.kill_course_actors()
    assert len(killed) == 2 and all("course-model-worker" in name for name in killed)
    assert cleanup.course_actors() == []
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(workers[0].info.remote(), timeout=30)
    assert [a for a in cleanup.alive_course_actors() if "ModelWorker" in a["class_name"]] == []


def test_a_pool_on_a_full_cluster_waits_in_line_and_finishes_once_slots_free(
    ray_session, checkpoint_dir, digits, capsys
):
    """Four learners on four slots: every slot held by someone else's work. Lesson 05's pool neither
    hangs nor grabs a slot it must then wait beside: it says it waits, starts once a slot frees, and
    scores every digit."""
    import threading
    import time

    import ray

    images, _ = digits
    slots = int(ray.cluster_resources()["CPU"])

    @ray.remote(num_cpus=slots)
    class OtherLearners:
        def ping(self) -> str:
            return "holding"

    holder = OtherLearners.remote()
    ray.get(holder.ping.remote())
    freed_at: list[float] = []

    def free_later() -> None:
        time.sleep(12)
        freed_at.append(time.monotonic())
        ray.kill(holder, no_restart=True)

    threading.Thread(target=free_later, daemon=True).start()
    started = time.monotonic()
    timing = inference_timing.time_batch_inference(
        checkpoint_dir, images, BatchPredictor, batch_predict, pool_size=2, batch_size=64
    )
    err = capsys.readouterr().err
    assert timing.images == len(images), "every digit scored"
    assert freed_at and time.monotonic() - started > 12, "it could only finish after the slots freed"
    assert f"waiting for 1 CPU slot: 0 of {slots} free" in err and "this pool starts when they finish" in err
    assert timing.pool is not None and 1 <= timing.pool.size <= 2
