"""The workshop a learner joins: a Ray cluster someone else started, shared S3 storage, a teammate.

A workshop host runs ``ray start --head`` and points every learner at it (``RAY_ADDRESS``) and at
one bucket prefix (``COURSE_STORAGE=s3://...``, ``COURSE_S3_ENDPOINT``). What belongs to other
people is planted before lesson 01 and must survive lesson 06: an object of the organiser's under
the same prefix, and a teammate (another learner, another driver process on the same cluster,
``COURSE_LEARNER=teammate``) with a run in storage and a course actor alive in their namespace.

The cluster is a real ``ray start --head`` (with its dashboard, as a plain ``ray start`` has) on
a loopback address of its own; S3 is moto's server on loopback; MNIST lives in a folder of the
workshop's own (``COURSE_DATA``), shared by every learner and kept by lesson 06. ``tests/browser`` runs every lesson
from JupyterLab in this setting (``workshop`` is a module fixture: import it there).
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid

import pytest

from maintainer_tools.cluster import LocalCluster, NodeSpec

ORGANISER_NOTE = "NOTES-from-the-organiser.txt"
TEAMMATE = "teammate"
TEAMMATE_ACTOR = "course-model-worker-of-a-teammate"

# A teammate's session: joins the cluster as learner "teammate", writes a run into their own
# storage folder, starts a course actor in their namespace, and stays connected (as a kernel
# does) until the test ends; "check" on stdin answers whether the actor still lives. Its answers
# start with "TEAMMATE" (Ray may write its own lines to a driver's stdout).
TEAMMATE_SESSION = textwrap.dedent(
    f"""
    import sys
    import ray
    from course_utils.core import session

    store = session.start_ray(verbose=False, log_to_driver=False).storage
    fs, root = store.learner_filesystem()  # <prefix>/course-teammate, with its owner record
    fs.create_dir(f"{{root}}/lesson02-resnet18")
    with fs.open_output_stream(f"{{root}}/lesson02-resnet18/result.json") as f:
        f.write(b'{{"teammate": "my run"}}')

    @ray.remote(num_cpus=0)
    class ModelWorker:
        def ping(self):
            return "alive"

    actor = ModelWorker.options(name="{TEAMMATE_ACTOR}").remote()  # in this learner's namespace
    print("TEAMMATE READY", root, ray.get(actor.ping.remote()), flush=True)
    for line in sys.stdin:
        try:
            print("TEAMMATE", ray.get(actor.ping.remote(), timeout=30), flush=True)
        except Exception as error:
            print(f"TEAMMATE dead ({{type(error).__name__}})", flush=True)
    """
)


@pytest.fixture(scope="module")
def workshop(s3_env, s3_admin, tmp_path_factory):
    """The cluster, the bucket prefix and the environment a workshop learner's kernel gets."""
    bucket = f"workshop-{uuid.uuid4().hex[:8]}"
    fs = s3_admin
    fs.create_dir(bucket)
    with fs.open_output_stream(f"{bucket}/course/{ORGANISER_NOTE}") as f:
        f.write(b"Welcome! This file is the organiser's, not the course's.\n")
    env = {
        **s3_env,
        "COURSE_STORAGE": f"s3://{bucket}/course",
        "COURSE_DATA": str(tmp_path_factory.mktemp("workshop-data")),
    }
    cluster = LocalCluster(head=NodeSpec(num_cpus=4), nodes=[], dashboard=True).start()
    patch = pytest.MonkeyPatch()
    # RAY_ADDRESS and RAY_AUTH_MODE=token: what the host tells every learner (the token is in this
    # machine's ~/.ray/auth_token, where the cluster's nodes found it).
    for key, value in {**env, **cluster.driver_env()}.items():
        patch.setenv(key, value)
    teammate = subprocess.Popen(
        [sys.executable, "-c", TEAMMATE_SESSION],
        env={**os.environ, "COURSE_LEARNER": TEAMMATE},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in teammate.stdout], daemon=True).start()
    try:
        ready = _teammate_says(lines).split()
        assert ready[:1] == ["READY"] and ready[-1] == "alive", (
            f"the teammate's session did not start: {ready}"
        )
        assert ready[1].endswith("/course-teammate"), ready
        yield {
            "fs": fs,
            "bucket": bucket,
            "cluster": cluster,
            "teammate": teammate,
            "teammate_lines": lines,
            "teammate_root": ready[1],
        }
    finally:
        os.killpg(teammate.pid, signal.SIGKILL)
        teammate.wait(timeout=30)
        patch.undo()
        cluster.stop()


def _teammate_says(lines: queue.Queue, timeout_s: float = 120.0) -> str:
    """The teammate's next answer (a line starting with TEAMMATE), skipping Ray's own lines."""
    deadline = time.monotonic() + timeout_s
    while (left := deadline - time.monotonic()) > 0:
        try:
            line = lines.get(timeout=left)
        except queue.Empty:
            break
        if line.startswith("TEAMMATE "):
            return line[len("TEAMMATE ") :].strip()
    return f"no answer from the teammate's session within {timeout_s:g} s"


def check_others_left_alone(workshop: dict) -> None:
    """Assert that the organiser's file, the teammate's run and the teammate's actor are all still there."""
    import pyarrow.fs as pafs

    fs, bucket = workshop["fs"], workshop["bucket"]
    note = fs.get_file_info(f"{bucket}/course/{ORGANISER_NOTE}")
    run = fs.get_file_info(f"{workshop['teammate_root']}/lesson02-resnet18/result.json")
    teammate = workshop["teammate"]
    teammate.stdin.write("check\n")
    teammate.stdin.flush()
    actor = _teammate_says(workshop["teammate_lines"])
    assert note.type == pafs.FileType.File, "lesson 06 deleted the organiser's file under the shared prefix"
    assert run.type == pafs.FileType.File, "lesson 06 deleted a teammate's run"
    assert actor == "alive", f"lesson 06 killed a teammate's actor ({actor})"
