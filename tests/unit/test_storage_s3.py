"""COURSE_STORAGE=s3://... through storage.resolve().for_ray(), against a real S3-API server on loopback."""

import pyarrow.fs as pafs
import pytest

from course_utils.core import config
from course_utils.core import storage as st


def test_local_storage_is_a_plain_path(storage):
    path, fs = st.resolve().for_ray()
    assert path == str(storage.resolve()) and fs is None


def test_s3_uri_with_endpoint_gives_bucket_path_and_s3_filesystem(monkeypatch):
    monkeypatch.setenv("COURSE_STORAGE", "s3://my-bucket/course/")
    monkeypatch.setenv("COURSE_S3_ENDPOINT", "http://127.0.0.1:9000/")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "key")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    path, fs = st.resolve().for_ray()
    assert path == f"my-bucket/course/{st.resolve().folder}"
    assert isinstance(fs, pafs.S3FileSystem)
    settings = fs.__reduce__()[1][0]  # what travels to the workers with the filesystem
    assert settings["endpoint_override"] == "127.0.0.1:9000" and settings["scheme"] == "http"
    assert settings["region"] == "us-east-1" and settings["access_key"] == "key"


@pytest.mark.parametrize("endpoint", ["127.0.0.1:9000", "ftp://host", "http://host/some/path", "http://"])
def test_bad_endpoint_names_the_variable(monkeypatch, endpoint):
    monkeypatch.setenv("COURSE_STORAGE", "s3://b/p")
    monkeypatch.setenv("COURSE_S3_ENDPOINT", endpoint)
    with pytest.raises(config.CourseConfigError) as info:
        st.resolve().for_ray()
    assert "COURSE_S3_ENDPOINT" in str(info.value) and "http://127.0.0.1:9000" in str(info.value)


def test_s3_uri_without_bucket_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("COURSE_STORAGE", "s3://")
    monkeypatch.setenv("COURSE_S3_ENDPOINT", "http://127.0.0.1:9000")
    with pytest.raises(config.CourseConfigError) as info:
        st.resolve().for_ray()
    assert "names no bucket" in str(info.value)


def test_run_helpers_work_in_s3(s3_storage):
    path, fs = st.resolve().for_ray()
    fs.create_dir(f"{path}/mine/checkpoint_000000")
    with fs.open_output_stream(f"{path}/mine/checkpoint_000000/state.pt") as f:
        f.write(b"x")
    with fs.open_output_stream(f"{path}/other/marker") as f:
        f.write(b"x")
    assert st.resolve().run_exists("mine") and not st.resolve().run_exists("nothing-here")
    with pytest.raises(st.RunCorruptedError, match="no checkpoint_manager_snapshot.json"):
        st.resolve().check_run("mine")
    deleted = st.resolve().reset_run("mine")
    assert deleted and not st.resolve().run_exists("mine") and st.resolve().run_exists("other")


def test_missing_bucket_is_a_clear_error(s3_storage, monkeypatch):
    monkeypatch.setenv("COURSE_STORAGE", "s3://no-such-bucket-here/runs")
    with pytest.raises(config.CourseConfigError) as info:
        st.resolve().run_exists("anything")
    assert "no-such-bucket-here" in str(info.value) and "COURSE_S3_ENDPOINT" in str(info.value)


def test_unreachable_endpoint_is_a_clear_error(monkeypatch):
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("COURSE_STORAGE", "s3://bucket/runs")
    monkeypatch.setenv("COURSE_S3_ENDPOINT", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    with pytest.raises(config.CourseConfigError) as info:
        st.resolve().run_exists("anything")
    assert "Cannot read COURSE_STORAGE='s3://bucket/runs'" in str(info.value)
