"""Shared fixtures. Integration tests share one local Ray per test module (start ≈ 6-15 s)."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(autouse=True)
def _smoke_profile(monkeypatch):
    """Tests always run the smoke profile unless a test says otherwise."""
    monkeypatch.setenv("COURSE_PROFILE", os.environ.get("COURSE_TEST_PROFILE", "smoke"))


@pytest.fixture(scope="session")
def mnist_root():
    """MNIST prepared once for the whole test run (offline copy here)."""
    from course_utils.core import data

    return data.ensure_mnist(verbose=False).root


@pytest.fixture(scope="module")
def ray_session(mnist_root):
    """A local Ray for one test module, shut down afterwards so notebooks get the machine."""
    import ray

    from course_utils.core import session

    started_here = not ray.is_initialized()
    info = session.start_ray(verbose=False)
    yield info
    if started_here:
        ray.shutdown()


@pytest.fixture
def storage(tmp_path, monkeypatch):
    """A fresh COURSE_STORAGE for one test; returns this learner's folder in it
    (``<COURSE_STORAGE>/course-<learner>``), where the course's runs and outputs go."""
    from pathlib import Path

    from course_utils.core import storage as course_storage

    monkeypatch.setenv("COURSE_STORAGE", str(tmp_path / "storage"))
    return Path(course_storage.resolve().prepare())


@pytest.fixture(scope="session")
def s3_server():
    """A real S3-API server (moto's server mode) on a free loopback port; its endpoint URL."""
    import shutil
    import signal
    import socket
    import subprocess
    import sys
    import time
    import urllib.request
    from pathlib import Path

    server = Path(sys.executable).with_name("moto_server")
    if not server.exists() and shutil.which("moto_server") is None:
        pytest.fail(
            'moto_server is missing: pip install "moto[server]" (pinned in requirements-dev.txt; ./build.sh test installs it)'
        )
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    process = subprocess.Popen(
        [str(server if server.exists() else "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=2)
            break
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                pytest.fail(f"moto_server did not start on {endpoint}")
            time.sleep(0.3)
    yield endpoint
    os.killpg(process.pid, signal.SIGTERM)
    process.wait(timeout=30)


@pytest.fixture(scope="session")
def s3_env(s3_server) -> dict[str, str]:
    """The environment a course process needs for the loopback S3 server (test credentials)."""
    return {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_REGION": "us-east-1",
        "COURSE_S3_ENDPOINT": s3_server,
    }


@pytest.fixture(scope="session")
def s3_admin(s3_server):
    """A pyarrow filesystem on the loopback S3 server that may create buckets (tests' own setup)."""
    import pyarrow.fs as pafs

    return pafs.S3FileSystem(
        access_key="testing",
        secret_key="testing",
        region="us-east-1",
        scheme="http",
        endpoint_override=s3_server.split("://", 1)[1],
        allow_bucket_creation=True,
    )


@pytest.fixture
def s3_storage(s3_env, s3_admin, monkeypatch, request):
    """COURSE_STORAGE=s3://<fresh bucket>/runs on the loopback S3 server, with test credentials."""
    import re
    import uuid

    for key, value in s3_env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    bucket = f"{re.sub('[^a-z0-9]', '-', request.node.name.lower())[:40]}-{uuid.uuid4().hex[:8]}"
    s3_admin.create_dir(bucket)
    monkeypatch.setenv("COURSE_STORAGE", f"s3://{bucket}/runs")
    return f"s3://{bucket}/runs"
