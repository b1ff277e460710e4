"""Unit tests for maintainer_tools.bench: the dispatcher finds every benchmark and each parses its own
options; the ingest benchmark's DataLoader baseline decodes like the lesson's transform. No Ray
cluster: only ``--help`` runs, and the benchmarks themselves are never timed in tests."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest

from course_utils.core import compare, data
from course_utils.lesson03 import raydata
from maintainer_tools import bench
from maintainer_tools.bench import startup
from maintainer_tools.bench.ingest import DigitsDataset

# One option each benchmark's --help must show: proof the subcommand reached its own parser.
OPTIONS = {
    "train": "--epochs",
    "ingest": "--rows",
    "recovery": "--checkpoint-every",
    "checkpoint": "--checkpoint-every",
    "validation": "--test-size",
    "inference": "--pool-size",
    "startup": "--rounds",
    "workshop": "--counts",
    "hosts": "Time a local storage refused",
    "install": "--keep",
}


def test_every_benchmark_is_dispatched():
    assert set(bench.COMMANDS) == set(OPTIONS)


@pytest.mark.parametrize("name", sorted(OPTIONS))
def test_each_benchmark_parses_its_own_options(name, capsys):
    with pytest.raises(SystemExit) as helped:
        bench.main([name, "--help"])
    assert helped.value.code == 0
    assert OPTIONS[name] in capsys.readouterr().out


def test_unknown_benchmark_is_a_usage_error():
    with pytest.raises(SystemExit) as unknown:
        bench.main(["no-such-bench"])
    assert unknown.value.code == 2


def test_python_dash_m_runs_the_dispatcher():
    out = subprocess.run(
        [sys.executable, "-m", "maintainer_tools.bench", "--help"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert "train" in out.stdout and "inference" in out.stdout


def test_digits_dataset_matches_vectorised_transform(mnist_root):
    images, labels = data.raw_arrays(True, 16, mnist_root)
    image, label = DigitsDataset(images, labels)[3]
    fast = raydata.normalise_batch({"image": images[3:4], "label": labels[3:4]})
    np.testing.assert_allclose(image.numpy(), fast["image"][0], rtol=0, atol=1e-6)
    assert label == labels[3]


def _task(kind, name, actor, created, running=None, finished=None):
    events = [{"state": "PENDING_NODE_ASSIGNMENT", "created_ms": created * 1000}]
    events += [
        {"state": s, "created_ms": t * 1000} for s, t in (("RUNNING", running), ("FINISHED", finished)) if t
    ]
    return SimpleNamespace(
        type=kind,
        func_or_class_name=f"{name}.__init__" if kind == "ACTOR_CREATION_TASK" else name,
        actor_id=actor,
        creation_time_ms=created * 1000,
        end_time_ms=finished * 1000 if finished else None,
        events=events,
    )


def test_fit_timeline_splits_a_fit_into_parts_that_add_up():
    creation, call = "ACTOR_CREATION_TASK", "ACTOR_TASK"
    tasks = [
        _task(creation, "TrainController", "c", 101.0, running=103.0, finished=104.0),
        _task(creation, "RayTrainWorker", "w0", 105.0, running=107.0, finished=107.5),
        _task(creation, "RayTrainWorker", "w1", 105.1, running=107.2, finished=107.6),
        _task(call, "RayTrainWorker.execute", "w0", 107.7, running=107.7, finished=109.0),
        _task(call, "RayTrainWorker.execute", "w1", 107.7, running=107.7, finished=109.5),
        _task(call, "RayTrainWorker.run_train_fn", "w0", 109.6, running=109.6, finished=109.7),
        _task(creation, "SomethingElse", "x", 102.0, running=102.5, finished=103.0),
    ]
    marks = [
        {"first_line": 110.0, "before_report": 110.1, "after_report": 110.5},
        {"first_line": 110.2, "before_report": 110.3, "after_report": 110.4},
    ]
    rows = startup.fit_timeline(100.0, 112.5, marks, tasks)
    assert rows["driver: fit() to controller requested"] == pytest.approx(1.0)
    assert rows["controller: process up"] == pytest.approx(2.0)
    assert rows["controller: __init__ (imports, callbacks)"] == pytest.approx(1.0)
    assert rows["controller: run start, placement group, sync actor"] == pytest.approx(1.0)
    assert rows["workers: processes up"] == pytest.approx(2.2)
    assert rows["workers: __init__"] == pytest.approx(0.4)
    assert rows["workers: execute (2 calls)"] == pytest.approx(1.9)  # from the last __init__ to the last end
    assert rows["workers: to the loop's first line"] == pytest.approx(0.7)
    assert rows["loop: before its report (the training steps, if any)"] == pytest.approx(0.1)
    assert rows["loop: its one report"] == pytest.approx(0.2)
    assert rows["after the last report until fit() returns"] == pytest.approx(2.0)
    assert rows["fit: total"] == pytest.approx(12.5)
    parts = sum(v for k, v in rows.items() if k != "fit: total")
    assert parts == pytest.approx(rows["fit: total"])
    # --train-steps: the timed steps are a row of their own, inside "before its report"
    marks[0].update(train_start=110.02, train_end=110.07)
    marks[1].update(train_start=110.21, train_end=110.29)
    rows = startup.fit_timeline(100.0, 112.5, marks, tasks)
    assert rows["(of which: the timed training steps, slowest rank)"] == pytest.approx(0.08)
    parts = sum(v for k, v in rows.items() if k != "fit: total" and not k.startswith("(of which"))
    assert parts == pytest.approx(rows["fit: total"])


def test_startup_try_settings_parse_and_compare(capsys):
    from maintainer_tools.bench import startup

    assert startup.parse_tries(["RAY_TRAIN_HEALTH_CHECK_INTERVAL_S=0.1", "B=x=y"]) == {
        "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "0.1",
        "B": "x=y",
    }
    with pytest.raises(SystemExit, match="KEY=VALUE"):
        startup.parse_tries(["no-equals"])
    startup.print_comparison("t", {"fit: total": 16.0, "only before": 1.0}, {"fit: total": 15.0})
    out = capsys.readouterr().out
    assert "fit: total   16.00 s ->  15.00 s  (-1.00 s)" in out and "only before" not in out


def test_workshop_bench_fails_in_plain_words_when_a_learner_fails(monkeypatch):
    import subprocess

    from maintainer_tools.bench import workshop

    class Failed:
        returncode = 1

        def __init__(self, *args, **kwargs):
            pass

        def communicate(self, timeout=None):
            return "", "ConnectionError: the cluster refused this driver"

    monkeypatch.setattr(subprocess, "Popen", Failed)
    with pytest.raises(RuntimeError, match=r"learner 1 of 2 failed \(exit 1\):\nConnectionError"):
        workshop.run_round(2, 1, {})


def test_validation_bench_gives_every_rank_the_whole_test_set():
    """The every-rank run is lesson 02's loop with its test share edited out; the lesson's loop is untouched."""
    import inspect

    import cloudpickle

    from course_utils import lesson_code
    from maintainer_tools.bench import validation

    original = inspect.getsource(lesson_code.train_loop_per_worker)
    variant = validation.train_loop_every_rank_scores_all()
    assert validation.RANK_SHARE in original
    assert variant is not lesson_code.train_loop_per_worker
    assert (
        variant.__code__.co_code != lesson_code.train_loop_per_worker.__code__.co_code
    )  # the Subset call gone
    # Ray ships it by value: a module nobody can import on a worker would fail the fit
    assert variant.__module__ == "bench_validation_every_rank"
    assert cloudpickle.loads(cloudpickle.dumps(variant)).__name__ == "train_loop_per_worker"
    assert inspect.getsource(lesson_code.train_loop_per_worker) == original


def test_validation_bench_stops_when_the_loop_changed_its_share(monkeypatch):
    from maintainer_tools.bench import validation

    monkeypatch.setattr(validation, "RANK_SHARE", "a line the loop does not have")
    with pytest.raises(SystemExit, match="update this bench"):
        validation.train_loop_every_rank_scores_all()


def test_bench_train_gpu_without_a_gpu_says_so_in_one_line_and_exits_0():
    import os

    from tests.checkout import REPO_ROOT

    run = subprocess.run(
        [sys.executable, "-m", "maintainer_tools.bench", "train", "--gpu"],
        cwd=REPO_ROOT,
        env={**os.environ, "CUDA_VISIBLE_DEVICES": ""},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip().splitlines() == [
        "bench train --gpu: no GPU visible to PyTorch here, so there is nothing to measure (exit 0)"
    ]
    assert run.stderr == ""


def test_bench_train_gpu_measures_busy_share_inside_each_window():
    from maintainer_tools.bench import gpu

    sampler = gpu.BusySampler(lambda: None)
    sampler.samples = [(1.0, 10.0), (2.0, 90.0), (3.0, 80.0), (9.0, 5.0)]
    assert sampler.mean(1.5, 3.5) == 85.0
    assert np.isnan(sampler.mean(4.0, 5.0))
    assert compare.steady([10.0, 100.0, 90.0, 110.0]) == 100.0, "the first epoch (warm-up) is left out"


def test_bench_train_gpu_tiles_the_digits_to_the_rows_asked(tmp_path, mnist_root):
    from maintainer_tools.bench import gpu

    root, rows = gpu.tiled_copy(tmp_path, 10_000)
    have = data.raw_arrays(True, root=mnist_root)[1]
    assert rows >= 10_000 and rows % len(have) == 0
    images, labels = data.raw_arrays(True, root=root)
    assert len(labels) == rows and np.array_equal(labels[: len(have)], have)
    _, few = gpu.tiled_copy(tmp_path / "few", 100)
    assert few == 100 and len(data.raw_arrays(True, root=tmp_path / "few")[1]) == 100
