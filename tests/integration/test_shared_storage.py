"""A workshop shares one COURSE_STORAGE and one cluster: lesson 06 removes only this learner's things.

- S3 (moto's server on loopback, ``COURSE_S3_ENDPOINT``): a teammate's run and foreign objects under
  the same prefix survive ``cleanup.clean_storage``; the learner's runs and Parquet copy go.
- Ray: a teammate's ``course-*`` actor in their own namespace survives ``kill_course_actors``.
"""

from __future__ import annotations

import numpy as np
import pyarrow.fs as pafs
import pytest

from course_utils import lesson_inference
from course_utils.core import config, storage
from course_utils.core import storage as course_storage
from course_utils.core.storage import CleanupRefused
from course_utils.core.storage import resolve as resolve_storage
from course_utils.lesson03 import raydata
from course_utils.lesson05 import inference
from course_utils.lesson06 import cleanup
from maintainer_tools.harness.notebook_runs import SHARED
from maintainer_tools.harness.ownership import is_mine

pytestmark = [pytest.mark.integration, pytest.mark.path(SHARED)]


def _put(fs: pafs.FileSystem, path: str, data: bytes) -> None:
    with fs.open_output_stream(path) as f:
        f.write(data)


def test_s3_cleanup_leaves_a_teammates_run_and_foreign_objects(s3_storage, monkeypatch):
    store = course_storage.resolve()
    fs, shared = store.filesystem, store.root_path  # bucket/runs, through COURSE_S3_ENDPOINT
    # A teammate (bob) trained under the same prefix: his folder carries his record.
    monkeypatch.setenv("COURSE_LEARNER", "bob")
    bob_path, _ = course_storage.resolve().for_ray()
    _put(fs, f"{bob_path}/lesson02-resnet18/checkpoint_000000/state.pt", b"b" * 300)
    assert course_storage.resolve().run_exists(
        "lesson02-resnet18"
    )  # the first storage call marks bob's folder
    # Things that are nobody's course runs, under the same prefix.
    _put(fs, f"{shared}/notes.txt", b"a foreign object")
    _put(fs, f"{shared}/other-team/model.bin", b"x" * 50)
    # Alice, the learner: a run and a Parquet copy of the digits.
    monkeypatch.setenv("COURSE_LEARNER", "alice")
    alice_path, _ = course_storage.resolve().for_ray()
    assert alice_path == f"{shared}/course-alice"
    assert not course_storage.resolve().run_exists("lesson02-resnet18")  # bob's run is not alice's
    _put(fs, f"{alice_path}/lesson02-resnet18/checkpoint_000000/state.pt", b"a" * 1000)
    images, labels = np.zeros((8, 28, 28), np.uint8), np.arange(8)
    parquet = raydata.write_parquet(
        images,
        labels,
        raydata.default_parquet_path("train", 8, store=resolve_storage()),
        num_files=2,
        store=resolve_storage(),
    )
    assert parquet.startswith(f"{s3_storage}/course-alice/datasets/")
    assert is_mine(fs, f"{alice_path}/datasets/mnist-train-8.parquet")
    assert [n for n, _ in raydata.parquet_files(parquet, store=resolve_storage())] == [
        "part-000.parquet",
        "part-001.parquet",
    ]
    raydata.write_parquet(
        images, labels, parquet, num_files=2, store=resolve_storage()
    )  # its own folder: replaced
    assert storage.read_owner(fs, alice_path)["learner"] == "alice"

    mine = cleanup.storage_entries(store=resolve_storage())
    assert mine == [f"{s3_storage}/course-alice/datasets", f"{s3_storage}/course-alice/lesson02-resnet18"]
    left_before = cleanup.storage_left_alone(store=resolve_storage())
    assert left_before == [f"{s3_storage}/{n}" for n in ("course-bob", "notes.txt", "other-team")]
    dry = cleanup.clean_storage(dry_run=True, store=resolve_storage())
    assert (
        len(dry) == 2 and fs.get_file_info(f"{alice_path}/lesson02-resnet18").type == pafs.FileType.Directory
    )
    removed = cleanup.clean_storage(store=resolve_storage())

    assert sorted(r.path for r in removed) == mine
    assert sum(r.bytes for r in removed) > 1000
    assert cleanup.storage_entries(store=resolve_storage()) == []
    assert cleanup.storage_left_alone(store=resolve_storage()) == left_before
    with fs.open_input_stream(f"{bob_path}/lesson02-resnet18/checkpoint_000000/state.pt") as f:
        assert f.read() == b"b" * 300
    with fs.open_input_stream(f"{shared}/notes.txt") as f:
        assert f.read() == b"a foreign object"
    assert fs.get_file_info(f"{shared}/other-team/model.bin").size == 50
    assert storage.read_owner(fs, alice_path)["learner"] == "alice"  # the folder's record stays

    # A teammate's Parquet folder is not replaced, and a folder without the course's record is not emptied.
    monkeypatch.setenv("COURSE_LEARNER", "bob")
    bob_parquet = raydata.write_parquet(
        images, labels, f"{s3_storage}/course-bob/datasets/d.parquet", 1, store=resolve_storage()
    )
    monkeypatch.setenv("COURSE_LEARNER", "alice")
    with pytest.raises(CleanupRefused, match="learner 'bob'"):
        raydata.write_parquet(images, labels, bob_parquet, store=resolve_storage())
    _put(fs, f"{shared}/course-carol/thesis.tex", b"mine")
    monkeypatch.setenv("COURSE_LEARNER", "carol")
    with pytest.raises(CleanupRefused, match=storage.OWNER_FILE):
        cleanup.clean_storage(store=resolve_storage())
    assert fs.get_file_info(f"{shared}/course-carol/thesis.tex").type == pafs.FileType.File


def test_kill_course_actors_leaves_a_teammates_actor_alive(ray_session, tmp_path, monkeypatch):
    import ray
    import ray.train

    checkpoint = ray.train.Checkpoint.from_directory(
        str(inference.placeholder_checkpoint(resolve_storage(), tmp_path / "ckpt"))
    )
    assert ray.get_runtime_context().namespace == config.learner_namespace()  # start_ray joined it
    # A teammate's model server on the same cluster: same prefix, same class, their namespace.
    teammate = (
        ray.remote(lesson_inference.ModelWorker)
        .options(name="course-model-worker-bob", namespace="course-bob", num_cpus=1)
        .remote(checkpoint)
    )
    monkeypatch.setenv("COURSE_LEARNER", "alice")
    # alice's, as her driver (joined to her namespace by start_ray) would start lesson 05's actor
    mine = (
        ray.remote(lesson_inference.ModelWorker)
        .options(name=inference.actor_name("model-worker"), namespace=config.learner_namespace(), num_cpus=1)
        .remote(checkpoint)
    )
    try:
        ray.get([teammate.info.remote(), mine.info.remote()])
        assert [(a["namespace"], a["name"][:19]) for a in cleanup.course_actors()] == [
            ("course-alice", "course-model-worker")
        ]
        assert [a["namespace"] for a in cleanup.alive_course_actors()] == ["course-alice"]
        killed = cleanup.kill_course_actors()
        assert len(killed) == 1 and killed[0].startswith("course-alice/course-model-worker-")
        with pytest.raises(ray.exceptions.RayActorError):
            ray.get(mine.info.remote(), timeout=30)
        assert ray.get(teammate.info.remote(), timeout=60)["predict_calls"] == 0  # still serving
        assert cleanup.course_actors() == []
        assert cleanup.alive_course_actors() == []  # bob's ModelWorker is alive, and not alice's
        assert ray.get_actor("course-model-worker-bob", namespace="course-bob") is not None
    finally:
        ray.kill(teammate, no_restart=True)
