"""course_utils.internals.stacks against recorded py-spy dumps of a live report hang (Ray 2.58, local Ray).

Recorded while faults.train_loop_skipping_report hung: rank 0 waiting in its second
ray.train.report, rank 1 returned after skipping it; both as `py-spy dump --json` (what the course
runs on this machine) and as plain text (what the dashboard's /worker/traceback returns).
"""

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from course_utils.internals import dashboard, stacks

DATA = Path(__file__).parent / "data" / "inspect"


def recorded(name: str) -> dict[str, list[stacks.Frame]]:
    return stacks.parse_py_spy_json((DATA / f"pyspy_{name}.json").read_text())


def test_waiting_rank_points_at_the_report_line():
    stack = stacks.WorkerStack(pid=11045, threads=recorded("rank0_waiting"), rank=0)
    mine = stack.learner_frames()
    assert [(f.function, f.line) for f in mine] == [("train_loop_skipping_report", 257)]
    assert mine[0].where == "course_utils/lesson04/faults.py:257"
    assert stack.waiting_in().function == "Worker.get_objects"  # blocked in ray.get inside report
    text = stack.describe()
    assert text.startswith("rank 0 (pid 11045, py-spy):") and "train_loop_skipping_report" in text


def test_json_keeps_full_paths_and_library_frames_are_cut():
    threads = recorded("rank0_waiting")
    training = threads["TrainingThread(train_fn_with_final_checkpoint_flush)"]
    assert training[0].file.endswith("/site-packages/ray/_private/worker.py")
    assert stacks.learner_frames(training)[0].file.endswith("/course_utils/lesson04/faults.py")
    # the other threads (actor main loop, GC, monitor) hold no learner frame
    assert [name for name, frames in threads.items() if stacks.learner_frames(frames)] == [
        "TrainingThread(train_fn_with_final_checkpoint_flush)"
    ]


def test_skipping_rank_has_left_the_training_function():
    stack = stacks.WorkerStack(pid=11074, threads=recorded("rank1_skipped"), rank=1)
    assert set(stack.threads) == {"MainThread", "PythonGCThread"}
    assert stack.learner_frames() == [] and stack.waiting_in() is None
    assert "not in your code" in stack.describe()


def test_library_or_learner():
    assert stacks.is_library("/x/.venv/lib/python3.11/site-packages/ray/train/v2/api/train_fn_utils.py")
    assert stacks.is_library("ray/train/v2/api/train_fn_utils.py") and stacks.is_library("threading.py")
    assert stacks.is_library("<frozen importlib._bootstrap>")
    assert not stacks.is_library("/work/main/course_utils/lesson04/faults.py")
    assert not stacks.is_library("course_utils/lesson04/faults.py")
    assert not stacks.is_library("/tmp/ipykernel_123/456.py")  # a function defined in a notebook


def test_named_functions_anchor_outside_ray_train():
    frames = [
        stacks.Frame("Worker.get_objects", "ray/_private/worker.py", 1004),
        stacks.Frame("read_shard", "/work/main/course_utils/x.py", 12),
        stacks.Frame("Reader.consume", "/work/main/course_utils/x.py", 30),
        stacks.Frame("actor_method_executor", "ray/_private/function_manager.py", 700),
    ]
    assert [f.function for f in stacks.learner_frames(frames, ["consume"])] == [
        "Reader.consume",
        "read_shard",
    ]
    assert stacks.learner_frames(frames) == []  # no Ray Train entry and no named function


def test_barrier_warning_block():
    block = stacks.warning_block((DATA / "sync_actor_err.log").read_text())
    assert block.splitlines()[0] == "`ray.train.report` has not been called by all 2 workers in the group."
    assert "join the `ray.train.report` call: [1]." in block
    assert stacks.warning_block("nothing here") == ""


def test_dump_local_of_a_real_process():
    if stacks.py_spy() is None:
        pytest.fail("py-spy is in requirements.txt and must be installed")
    code = "import time\ndef learner_sleep():\n    time.sleep(30)\nlearner_sleep()\n"
    proc = subprocess.Popen([sys.executable, "-c", code])
    try:
        time.sleep(1.0)
        threads = stacks.dump_local(proc.pid)
    finally:
        proc.kill()
        proc.wait()
    frames = next(iter(threads.values()))
    assert [f.function for f in stacks.learner_frames(frames, ["learner_sleep"])] == ["learner_sleep"]


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv (CI has both)"
)
def test_a_process_py_spy_may_not_read_is_one_sentence(monkeypatch, tmp_path):
    # What a Mac without sudo, or Ubuntu's ptrace_scope 1, does to py-spy, for real: py-spy runs without
    # CAP_SYS_PTRACE and the kernel refuses it a process that holds more capabilities than it does.
    real = stacks.py_spy()
    refused = tmp_path / "py-spy"
    refused.write_text(
        f'#!/bin/sh\nexec setpriv --bounding-set=-sys_ptrace --inh-caps=-sys_ptrace {real} "$@"\n'
    )
    refused.chmod(0o755)
    monkeypatch.setattr(stacks, "py_spy", lambda: str(refused))
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        time.sleep(1.0)
        [stack] = stacks.worker_stacks([{"pid": proc.pid, "rank": 1}])
    finally:
        proc.kill()
        proc.wait()
    assert stack.threads == {} and "Permission denied" in stack.unavailable, stack.unavailable
    line = stack.describe()
    assert line.startswith(f"rank 1 (pid {proc.pid}, no stack): its stack could not be read (py-spy dump")
    assert line.endswith("the lesson goes on without it") and "\n" not in line, line


def test_dump_local_explains_a_missing_process():
    with pytest.raises(stacks.StackUnavailable, match="py-spy dump --pid"):
        stacks.dump_local(2**22 + os.getpid())


def test_a_stack_that_cannot_be_read_is_one_sentence_and_the_others_still_show(monkeypatch):
    # rank 1 on a node where py-spy is refused: its line says why, rank 0's stack is still there
    def dump(pid, node_id=None, node_ip=None):
        if pid == 2:
            raise stacks.StackUnavailable("on node abcdef12: py-spy dump --pid 2 failed: Permission denied")
        return recorded("rank0_waiting"), "py-spy"

    monkeypatch.setattr(stacks, "dump", dump)
    found = stacks.worker_stacks([{"pid": 2, "rank": 1}, {"pid": 1, "rank": 0}])
    assert [s.rank for s in found] == [0, 1]
    assert found[0].learner_frames() and found[1].threads == {}
    line = found[1].describe()
    assert line.startswith("rank 1 (pid 2, no stack): its stack could not be read (on node abcdef12: ")
    assert "Permission denied" in line and line.count("\n") == 0


def test_a_worker_on_another_machine_is_read_by_a_task_on_its_node(monkeypatch):
    monkeypatch.setattr(stacks, "_on_this_machine", lambda pid, node_id, node_ip: False)
    asked = []
    monkeypatch.setattr(
        stacks,
        "dump_on_its_node",
        lambda pid, node_id: asked.append((pid, node_id)) or recorded("rank0_waiting"),
    )
    threads, source = stacks.dump(7, "node-b", "10.0.0.2")
    assert asked == [(7, "node-b")] and source == "py-spy on its node" and threads
    with pytest.raises(stacks.StackUnavailable, match="its node is not known"):
        stacks.dump(7, None, "10.0.0.2")


# Ray Data split hang: the coordinator's stderr as recorded (Ray 2.58, the lesson-03 demo), py-spy
# frames of a reader blocked in its first batch (names and files as a live dump showed them).
SPLIT_LOG = (DATA / "split_coordinator_err.log").read_text()
READER_0 = [
    stacks.Frame("Condition.wait", "/usr/lib/python3.11/threading.py", 327, "threading.py"),
    stacks.Frame("Queue.get", "/usr/lib/python3.11/queue.py", 171, "queue.py"),
    stacks.Frame(
        "iter_threaded", "/x/site-packages/ray/data/_internal/util.py", 1, "ray/data/_internal/util.py"
    ),
    stacks.Frame(
        "BatchIterator._iter_batches", "/x/site-packages/ray/data/_internal/block_batching/iter_batches.py", 1
    ),
    stacks.Frame(
        "SplitReader.read_shard",
        "/work/main/course_utils/internals/stacks.py",
        435,
        "course_utils/internals/stacks.py",
    ),
    stacks.Frame("actor_method_executor", "/x/site-packages/ray/_private/function_manager.py", 1),
    stacks.Frame("Worker.main_loop", "/x/site-packages/ray/_private/worker.py", 1066),
]


def test_split_warning_from_the_coordinator_log(monkeypatch):
    monkeypatch.setattr(
        stacks, "actor_logs", lambda class_name, job_id=None: iter([":job_id:01000000\n", SPLIT_LOG])
    )
    warning = stacks.split_warning()
    assert warning.startswith("StreamSplitDataIterator(epoch=-1, split=0) blocked waiting on other clients")
    monkeypatch.setattr(stacks, "actor_logs", lambda class_name, job_id=None: iter(["nothing yet\n"]))
    assert stacks.split_warning() is None


def test_reader_stacks_and_the_error_naming_the_idle_reader(monkeypatch):
    import ray

    reading = stacks.WorkerStack(101, {"MainThread": READER_0}, rank=0, role="reader")
    idle = stacks.WorkerStack(102, {"MainThread": READER_0[-1:]}, rank=1, role="reader")
    assert [f.function for f in reading.learner_frames(["read_shard"])] == ["SplitReader.read_shard"]
    assert idle.describe(["read_shard"]).startswith("reader 1 (pid 102, py-spy): not in your code")

    def timeout(refs, timeout):
        raise ray.exceptions.GetTimeoutError("timed out")

    monkeypatch.setattr(ray, "get", timeout)
    with pytest.raises(stacks.SplitHangError) as err:
        stacks.wait_for_readers(["ref"], timeout_s=1, since=time.monotonic() - 40, stacks=[reading, idle])
    assert "after 40 s" in str(err.value) and "reader 1 (pid 102) never did" in str(err.value)
    # where py-spy may not read (macOS, Ubuntu's ptrace_scope), a reader is not called idle for lack of frames
    unread = stacks.WorkerStack(101, {}, rank=0, role="reader", unavailable="py-spy dump --pid 101 failed")
    with pytest.raises(stacks.SplitHangError) as err:
        stacks.wait_for_readers(["ref"], timeout_s=1, since=time.monotonic() - 40, stacks=[unread, idle])
    assert "reader 1 (pid 102) never did" in str(err.value) and "reader 0" not in str(err.value)


def test_wait_for_answers_or_times_out():
    answers = iter([None, None, "there"])
    assert stacks.wait_for(lambda: next(answers), timeout_s=5, poll_s=0.01) == "there"
    with pytest.raises(TimeoutError):
        stacks.wait_for(lambda: None, timeout_s=0.05, poll_s=0.01)


def test_hang_watch_ignores_an_earlier_runs_barrier_warning(monkeypatch):
    """A SynchronizationActor alive at start() (an earlier run's, shutting down) keeps its own warning in
    its log; the watch must wait for this run's, not dump this run's workers at once."""

    log = (DATA / "sync_actor_err.log").read_text()
    alive = [{"actor_id": "earlier", "class_name": stacks.SYNC_ACTOR_CLASS, "job_id": "01000000"}]
    monkeypatch.setattr(dashboard, "alive_actors", lambda class_substring="": list(alive))
    read = []

    def fake_get_log(address, actor_id, suffix, tail):
        read.append(actor_id)
        return iter([log])

    import ray
    import ray.util.state

    class Context:
        gcs_address = "127.0.0.1:1"

        def get_job_id(self):
            return "01000000"

    monkeypatch.setattr(ray, "get_runtime_context", lambda: Context())
    monkeypatch.setattr(ray.util.state, "get_log", fake_get_log)
    dumped = []
    monkeypatch.setattr(stacks, "train_workers", lambda run_name: [{"pid": 1, "rank": 0}])
    stack = stacks.WorkerStack(1, {"MainThread": []}, rank=0)
    monkeypatch.setattr(stacks, "worker_stacks", lambda workers: dumped.append(workers) or [stack])

    watch = stacks.HangWatch("run", poll_s=0.01).start()
    time.sleep(0.3)
    assert watch.warning is None and not dumped, "the earlier run's warning was taken for this run's"
    assert read == [], "the earlier actor's log is not even read"
    alive.append({"actor_id": "this run's", "class_name": stacks.SYNC_ACTOR_CLASS, "job_id": "01000000"})
    deadline = time.monotonic() + 5
    while watch.warning is None and time.monotonic() < deadline:
        time.sleep(0.01)
    watch.join()
    assert read and set(read) == {"this run's"}
    assert "[1]" in watch.warning and dumped == [[{"pid": 1, "rank": 0}]]
    report = watch.report("rank 0 waits")
    assert report.startswith("rank 0 waits\nwarning: ") and "s after the warning was read" in report
    assert report.endswith(
        "rank 0 (pid 1, py-spy): not in your code (it returned from it, or never started it)"
    )


# Where a package lives decides it, not the folder's name: Ray from a `pip install --target` folder on
# PYTHONPATH (what the first GPU machine had), and a package in Debian's dist-packages.
WHERE_RAY_IS = """
import importlib.util, sys
from course_utils.internals import stacks
print(importlib.util.find_spec("ray").origin)
for name in sys.argv[1:]:
    print(name, stacks.is_library(name))
"""


def test_library_frames_are_found_where_the_import_system_finds_them(tmp_path):
    import os
    import subprocess
    import sys

    from tests.checkout import REPO_ROOT

    # A --target folder (no "site-packages" in its path) whose ray shadows the venv's, as PYTHONPATH
    # made it on that machine; and a package known only by its metadata (a dist-info folder).
    target = tmp_path / "vendor"
    (target / "ray" / "train").mkdir(parents=True)
    (target / "ray" / "__init__.py").write_text("")
    (target / "vendored").mkdir()
    (target / "vendored" / "__init__.py").write_text("")
    (target / "vendored-1.0.dist-info").mkdir()
    (target / "vendored-1.0.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: vendored\nVersion: 1.0\n"
    )
    debian = tmp_path / "usr" / "lib" / "python3" / "dist-packages" / "debpkg"
    debian.mkdir(parents=True)
    (debian / "__init__.py").write_text("")
    learner = tmp_path / "home" / "me" / "my_loop.py"
    files = [
        f"{target}/ray/train/v2/api/train_fn_utils.py",
        "ray/train/v2/api/train_fn_utils.py",
        f"{target}/vendored/core.py",
        f"{debian}/worker.py",
        "debpkg/worker.py",
        str(learner),
        f"{REPO_ROOT}/course_utils/lesson04/faults.py",
    ]
    run = subprocess.run(
        [sys.executable, "-c", WHERE_RAY_IS, *files],
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(target), str(debian.parent), str(REPO_ROOT)])},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    found_ray, *lines = run.stdout.splitlines()
    assert found_ray == f"{target}/ray/__init__.py", "the subprocess finds the --target folder's ray first"
    verdicts = dict(line.rsplit(" ", 1) for line in lines)
    assert verdicts == {
        files[0]: "True",  # Ray where the import system found it, on PYTHONPATH
        files[1]: "True",  # py-spy's short name for it
        files[2]: "True",  # a distribution's folder, from its metadata
        files[3]: "True",  # Debian's dist-packages, on the path
        files[4]: "True",
        files[5]: "False",  # the learner's file
        files[6]: "False",  # the course's own code
    }, run.stdout
