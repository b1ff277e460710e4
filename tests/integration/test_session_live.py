"""session.start_ray against a real local Ray: the worker setup hook runs in every worker without a
job runtime_env (which would start each worker through a second Python, setup_worker.py)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.integration


def test_local_workers_run_the_setup_hook_without_a_runtime_env(ray_session):
    import ray

    @ray.remote(num_cpus=0)
    def inside() -> dict:
        import os
        import threading

        return {
            "runtime_env": dict(ray.get_runtime_context().runtime_env),
            "ray_address": os.environ.get("RAY_ADDRESS"),
            "excepthook_replaced": threading.excepthook is not threading.__excepthook__,
        }

    if ray_session.connected_to_existing:
        pytest.skip("a RAY_ADDRESS cluster gets the hook through the job's runtime_env")
    seen = ray.get(inside.remote())
    assert seen["runtime_env"] == {}, seen
    # What course_utils.internals.logs.setup_worker does first: the worker names its own cluster.
    assert seen["ray_address"] == ray.get_runtime_context().gcs_address, seen
    assert seen["excepthook_replaced"], seen


def test_the_dashboard_refuses_a_bare_request_and_takes_the_courses(ray_session, monkeypatch):
    """Ray 2.59+ turns token auth on for a local ray.init(): the dashboard's HTTP API answers 401 to a
    request without the token, and the course's request (Authorization: Bearer <token>) gets through."""
    import json
    import urllib.error
    import urllib.request

    import ray

    from course_utils.internals import dashboard, metrics

    if ray_session.dashboard_url is None:
        pytest.skip("no dashboard (ray[default] missing)")
    url = f"{ray_session.dashboard_url}/api/version"
    with pytest.raises(urllib.error.HTTPError) as bare:
        urllib.request.urlopen(url, timeout=20)
    refused = bare.value.code, bare.value.read().decode()
    answer = json.loads(dashboard.open_dashboard(url))
    # Prometheus endpoints are a plain HTTP server of each node's agent, outside the dashboard's
    # token check: the course's metrics sampler reads them without a token (fetch raises on a 401).
    metrics.fetch(metrics.endpoints()[0])

    assert refused == (401, "Unauthorized: Missing authentication token"), refused
    assert answer["ray_version"] == ray.__version__

    monkeypatch.setenv("RAY_AUTH_TOKEN", "not-this-clusters-token")
    with pytest.raises(dashboard.DashboardAuthError) as wrong:
        dashboard.open_dashboard(url)
    assert "answered 403" in str(wrong.value) and "ray get-auth-token" in str(wrong.value)


def test_a_kernel_stopped_with_sigterm_prints_no_ray_stack(tmp_path):
    """What Jupyter, papermill and nbmake do to a kernel that ran start_ray: SIGTERM. Ray's failure signal
    handler would print a C++ stack ("*** SIGTERM received ...") to stderr; start_ray turns it off."""
    import os
    import subprocess
    import sys

    code = (
        "import os, signal, time\n"
        "from course_utils.core import session\n"
        "session.start_ray(num_cpus=1, verbose=False)\n"
        "os.kill(os.getpid(), signal.SIGTERM)\n"
        "time.sleep(30)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["COURSE_STORAGE"] = str(tmp_path / "storage")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240, env=env)
    assert done.returncode in (15, -15), done.stderr[-2000:]  # ended by the signal, as a stopped kernel is
    assert "SIGTERM received" not in done.stderr and "PC: @" not in done.stderr, done.stderr[-2000:]


@pytest.fixture
def nearly_full_disk():
    """A 100 GiB disk (a sparse image, mounted through a loop device) with 4 GiB free: 96% used, over
    Ray's 95%, with more free than the course keeps. Needs root, as the hosts tier does."""
    import os
    import shutil
    import subprocess
    import tempfile
    from pathlib import Path

    if os.geteuid() != 0 or not shutil.which("losetup"):
        pytest.skip("mounting a disk image needs root and losetup (CI runs as root)")
    mount = Path(tempfile.mkdtemp(prefix="dk-", dir="/tmp"))  # short: Ray's sockets live under it
    image = Path(tempfile.mkdtemp(prefix="dk-img-")) / "disk.img"
    subprocess.run(["truncate", "-s", "100G", str(image)], check=True)
    subprocess.run(["mkfs.ext4", "-q", "-F", "-m", "0", str(image)], check=True)
    subprocess.run(["mount", "-o", "loop", str(image), str(mount)], check=True)
    try:
        free = shutil.disk_usage(mount).free
        subprocess.run(["fallocate", "-l", str(free - 4 * 2**30), str(mount / "filler")], check=True)
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)
        mount.rmdir()
        shutil.rmtree(image.parent, ignore_errors=True)


def test_a_nearly_full_disk_gets_one_note_instead_of_rays_error_every_10_s(nearly_full_disk, tmp_path):
    """On a disk over Ray's 95%, a local Ray's raylet prints "... is over 95% full ..." into every cell
    every 10 s (CI's shared disk did this to lessons 04 and 05). start_ray says it once and keeps
    3 GB free instead; a threshold the learner set is left alone, and then Ray's line does appear."""
    import os
    import re
    import subprocess
    import sys

    from course_utils.internals import rayinternals

    code = (
        "import time, ray\n"
        "from course_utils.core import session\n"
        "session.start_ray(num_cpus=1, verbose=False)\n"
        "ray.get(ray.remote(lambda: 1).remote())\n"
        "time.sleep(12)  # the raylet checks at start and says it again every 10 s; its log reaches us\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", rayinternals.DISK_THRESHOLD_ENV)}
    env.update(RAY_TMPDIR=str(nearly_full_disk), COURSE_STORAGE=str(tmp_path / "storage"))

    def run(**extra: str) -> subprocess.CompletedProcess:
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=240, env={**env, **extra}
        )
        assert done.returncode == 0, done.stderr[-3000:]
        return done

    guarded = run()
    assert re.search(r"is 9[5-9]\.\d% full, 4\.0 GB free", guarded.stdout), guarded.stdout
    assert "keeps the last 3.0 GB free" in guarded.stdout, guarded.stdout
    assert rayinternals.DISK_FULL_LINE not in guarded.stderr, guarded.stderr[-3000:]
    learners = run(**{rayinternals.DISK_THRESHOLD_ENV: "0.95"})
    assert "full" not in learners.stdout, learners.stdout
    assert rayinternals.DISK_FULL_LINE in learners.stderr, (
        "Ray's own guard speaks: " + learners.stderr[-3000:]
    )
