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
    from course_utils import data

    return data.ensure_mnist(verbose=False).root


@pytest.fixture(scope="module")
def ray_session(mnist_root):
    """A local Ray for one test module, shut down afterwards so notebooks get the machine."""
    import ray

    from course_utils import session

    started_here = not ray.is_initialized()
    info = session.start_ray(verbose=False)
    yield info
    if started_here:
        ray.shutdown()


@pytest.fixture
def storage(tmp_path, monkeypatch):
    """A fresh COURSE_STORAGE for one test."""
    path = tmp_path / "storage"
    monkeypatch.setenv("COURSE_STORAGE", str(path))
    return path
