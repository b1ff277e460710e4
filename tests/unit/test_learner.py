"""The learner identity (COURSE_LEARNER) and the ownership records that make shared storage safe."""

from __future__ import annotations

import getpass
import json

import pyarrow.fs as pafs
import pytest

from course_utils.core import config, storage
from maintainer_tools.harness.notebook_runs import SHARED
from maintainer_tools.harness.ownership import is_mine

pytestmark = [pytest.mark.path(SHARED)]


def test_learner_defaults_to_the_os_user(monkeypatch):
    monkeypatch.delenv("COURSE_LEARNER", raising=False)
    monkeypatch.setattr(getpass, "getuser", lambda: "jdoe")
    assert config.learner() == "jdoe"
    assert storage.resolve().folder == "course-jdoe" == config.learner_namespace()


def test_learner_from_env(monkeypatch):
    monkeypatch.setenv("COURSE_LEARNER", " alice.b_2-x ")
    assert config.learner() == "alice.b_2-x"


@pytest.mark.parametrize("bad", ["../bob", "a/b", ".hidden", "-x", "a b", "x" * 33, "ünï", "a\\b"])
def test_a_bad_learner_name_names_the_variable_and_the_allowed_characters(monkeypatch, bad):
    monkeypatch.setenv("COURSE_LEARNER", bad)
    with pytest.raises(config.CourseConfigError) as info:
        config.learner()
    message = str(info.value)
    assert "COURSE_LEARNER" in message and "letters, digits, '.', '_' or '-'" in message


def test_an_unusable_os_user_name_asks_for_course_learner(monkeypatch):
    monkeypatch.delenv("COURSE_LEARNER", raising=False)
    monkeypatch.setattr(getpass, "getuser", lambda: "CORP\\jane doe")
    with pytest.raises(config.CourseConfigError) as info:
        config.learner()
    assert "OS user name" in str(info.value) and "COURSE_LEARNER" in str(info.value)

    def no_user():
        raise KeyError("getpwuid(): uid not found: 1000")

    monkeypatch.setattr(getpass, "getuser", no_user)
    with pytest.raises(config.CourseConfigError) as info:
        config.learner()
    assert "COURSE_LEARNER" in str(info.value)


def test_learner_has_no_side_effects(tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_STORAGE", str(tmp_path / "s"))
    monkeypatch.setenv("COURSE_LEARNER", "alice")
    assert config.learner() == "alice" and storage.resolve().folder == "course-alice"
    assert not (tmp_path / "s").exists()


def test_runs_go_into_the_learners_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_STORAGE", str(tmp_path / "s"))
    monkeypatch.setenv("COURSE_LEARNER", "alice")
    path, fs = storage.resolve().for_ray()
    assert path == str((tmp_path / "s" / "course-alice").resolve()) and fs is None
    assert storage.resolve().run_path("r") == f"{path}/r"
    record = json.loads((tmp_path / "s" / "course-alice" / storage.OWNER_FILE).read_text())
    assert record["course"] == storage.COURSE_ID and record["learner"] == "alice"
    assert record["kind"] == "learner folder"
    monkeypatch.setenv("COURSE_LEARNER", "bob")
    assert storage.resolve().for_ray()[0] == str((tmp_path / "s" / "course-bob").resolve())
    monkeypatch.setenv("COURSE_STORAGE", "s3://bucket/shared")
    monkeypatch.setenv("COURSE_S3_ENDPOINT", "http://127.0.0.1:9")  # never contacted
    assert (
        storage.resolve().for_ray()[0] == "bucket/shared/course-bob"
    )  # no storage call: nothing written yet
    assert storage.resolve().mine == "s3://bucket/shared/course-bob"


def test_ownership_records(tmp_path, monkeypatch):
    fs = pafs.LocalFileSystem()
    monkeypatch.setenv("COURSE_LEARNER", "alice")
    folder = str(tmp_path / "made-by-the-course")
    assert storage.read_owner(fs, folder) is None and not is_mine(fs, folder)
    storage.claim_folder(fs, folder, "parquet")
    assert is_mine(fs, folder)
    monkeypatch.setenv("COURSE_LEARNER", "bob")
    assert not is_mine(fs, folder)
    storage.claim_folder(fs, folder, "parquet")  # a record naming alice stays alice's
    assert storage.read_owner(fs, folder)["learner"] == "alice"
    with pytest.raises(storage.CleanupRefused, match="learner 'alice'"):
        storage.refuse_unless_mine(fs, folder, folder, "empty")
    for text in ("not json", json.dumps({"course": "another-course", "learner": "bob"}), "[]"):
        (tmp_path / "made-by-the-course" / storage.OWNER_FILE).write_text(text)
        assert storage.read_owner(fs, folder) is None
