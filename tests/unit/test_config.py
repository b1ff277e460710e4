from pathlib import Path

import pytest

from course_utils.core import config, storage


def test_smoke_profile_is_small_and_cpu(monkeypatch):
    monkeypatch.setenv("COURSE_PROFILE", "smoke")
    p = config.get_profile()
    assert (p.name, p.use_gpu, p.num_workers) == ("smoke", False, 2)
    assert p.train_size <= 5000 and p.epochs <= 3


def test_auto_is_smoke_without_gpu(monkeypatch):
    monkeypatch.setattr(config, "gpu_count", lambda: 0)
    assert config.profile_name("auto") == "smoke"


def test_auto_is_full_with_gpus(monkeypatch):
    monkeypatch.setattr(config, "gpu_count", lambda: 4)
    assert config.profile_name("auto") == "full"
    p = config.get_profile("full")
    assert (p.num_workers, p.use_gpu, p.train_size) == (4, True, None)


def test_profile_name_is_case_insensitive():
    assert config.profile_name(" Smoke ") == "smoke"


def test_unknown_profile_names_the_allowed_ones(monkeypatch):
    monkeypatch.setenv("COURSE_PROFILE", "fast")
    with pytest.raises(config.CourseConfigError) as info:
        config.get_profile()
    message = str(info.value)
    assert "'fast'" in message and "smoke, full, auto" in message and "COURSE_PROFILE" in message


def test_profile_with_and_to_dict():
    p = config.SMOKE.with_(epochs=1, train_size=64)
    assert p.epochs == 1 and config.SMOKE.epochs == 3
    assert p.to_dict()["train_size"] == 64


def test_getters_create_nothing(tmp_path, monkeypatch):
    target = tmp_path / "a" / "b"
    monkeypatch.setenv("COURSE_STORAGE", str(target))
    monkeypatch.setenv("COURSE_DATA", str(tmp_path / "d"))
    assert config.storage_root() == str(target.resolve())
    assert storage.resolve().mine == str(target.resolve() / storage.resolve().folder)
    assert config.data_root() == (tmp_path / "d").resolve()
    assert list(tmp_path.iterdir()) == []


def test_preparing_storage_creates_the_learners_folder(tmp_path, monkeypatch):
    target = tmp_path / "a" / "b"
    monkeypatch.setenv("COURSE_STORAGE", str(target))
    mine = storage.resolve().prepare()
    assert mine == storage.resolve().mine
    assert (Path(mine) / storage.OWNER_FILE).is_file()
    assert sorted(p.name for p in target.iterdir()) == [storage.resolve().folder]  # no probe left behind


def test_storage_root_keeps_uris(monkeypatch):
    monkeypatch.setenv("COURSE_STORAGE", "s3://bucket/prefix/")
    assert config.storage_root() == "s3://bucket/prefix"
    assert config.is_remote_uri("s3://bucket/prefix") and not config.is_remote_uri("/tmp/x")


def test_unwritable_storage_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("COURSE_STORAGE", "/proc/course-storage")  # unwritable even for root
    with pytest.raises(config.CourseConfigError) as info:
        storage.resolve().prepare()
    message = str(info.value)
    assert (
        "COURSE_STORAGE" in message
        and "/proc/course-storage" in message
        and "not a writable folder" in message
    )


def test_data_root_from_env(tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_DATA", str(tmp_path / "d"))
    assert config.data_root() == (tmp_path / "d").resolve()


def test_local_output_dir_local_and_remote(tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_STORAGE", str(tmp_path / "s"))
    out = storage.resolve().local_output_dir("x")
    assert out == (tmp_path / "s" / storage.resolve().folder / "x").resolve() and out.is_dir()
    monkeypatch.setenv("COURSE_STORAGE", "s3://b/p")
    monkeypatch.setattr(storage, "build_root", lambda: tmp_path / "build")
    assert storage.resolve().local_output_dir("x") == tmp_path / "build" / storage.resolve().folder / "x"
    # two learners on one checkout (a workshop machine) never share a local output folder
    monkeypatch.setenv("COURSE_LEARNER", "someone-else")
    assert storage.resolve().local_output_dir("x") == tmp_path / "build" / "course-someone-else" / "x"
