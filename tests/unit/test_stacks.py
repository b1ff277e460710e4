"""course_utils.stacks against recorded py-spy dumps of a live report hang (Ray 2.58, local Ray).

Recorded while faults.train_loop_skipping_report hung: rank 0 waiting in its second
ray.train.report, rank 1 returned after skipping it; both as `py-spy dump --json` (what the course
runs on this machine) and as plain text (what the dashboard's /worker/traceback returns).
"""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from course_utils import stacks

DATA = Path(__file__).parent / "data" / "inspect"


def recorded(name: str, kind: str) -> dict[str, list[stacks.Frame]]:
    text = (DATA / f"pyspy_{name}.{kind}").read_text()
    return stacks.parse_py_spy_json(text) if kind == "json" else stacks.parse_py_spy_text(text)


@pytest.mark.parametrize("kind", ["json", "txt"])
def test_waiting_rank_points_at_the_report_line(kind):
    stack = stacks.WorkerStack(pid=11045, threads=recorded("rank0_waiting", kind), rank=0)
    mine = stack.learner_frames()
    assert [(f.function, f.line) for f in mine] == [("train_loop_skipping_report", 257)]
    assert mine[0].where == "course_utils/faults.py:257"
    assert stack.waiting_in().function == "Worker.get_objects"  # blocked in ray.get inside report
    text = stack.describe()
    assert text.startswith("rank 0 (pid 11045, py-spy):") and "train_loop_skipping_report" in text


def test_json_keeps_full_paths_and_library_frames_are_cut():
    threads = recorded("rank0_waiting", "json")
    training = threads["TrainingThread(train_fn_with_final_checkpoint_flush)"]
    assert training[0].file.endswith("/site-packages/ray/_private/worker.py")
    assert stacks.learner_frames(training)[0].file.endswith("/course_utils/faults.py")
    # the other threads (actor main loop, GC, monitor) hold no learner frame
    assert [name for name, frames in threads.items() if stacks.learner_frames(frames)] == [
        "TrainingThread(train_fn_with_final_checkpoint_flush)"
    ]


@pytest.mark.parametrize("kind", ["json", "txt"])
def test_skipping_rank_has_left_the_training_function(kind):
    stack = stacks.WorkerStack(pid=11074, threads=recorded("rank1_skipped", kind), rank=1)
    assert set(stack.threads) == {"MainThread", "PythonGCThread"}
    assert stack.learner_frames() == [] and stack.waiting_in() is None
    assert "not in your code" in stack.describe()


def test_text_parser_reads_threads_and_frames():
    threads = recorded("rank0_waiting", "txt")
    assert list(threads) == [
        "MainThread",
        "PythonGCThread",
        "MonitoringThread(train_fn_with_final_checkpoint_flush)",
        "TrainingThread(train_fn_with_final_checkpoint_flush)",
    ]
    first = threads["MainThread"][0]
    assert (first.function, first.file, first.line) == ("Worker.main_loop", "ray/_private/worker.py", 1066)


def test_library_or_learner():
    assert stacks.is_library("/x/.venv/lib/python3.11/site-packages/ray/train/v2/api/train_fn_utils.py")
    assert stacks.is_library("ray/train/v2/api/train_fn_utils.py") and stacks.is_library("threading.py")
    assert stacks.is_library("<frozen importlib._bootstrap>")
    assert not stacks.is_library("/work/main/course_utils/faults.py")
    assert not stacks.is_library("course_utils/faults.py")
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


def test_dump_local_explains_a_missing_process():
    with pytest.raises(stacks.StackUnavailable, match="py-spy dump --pid"):
        stacks.dump_local(2**22 + os.getpid())
