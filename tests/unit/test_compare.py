"""Lessons 02-03 compare their fit with lesson 01's plain PyTorch, in sentences computed from the figures."""

import pandas as pd

from course_utils import compare


def _history(*rates):
    return pd.DataFrame({"epoch": range(len(rates)), "images_per_s": rates})


def test_two_cpu_workers_slower_than_lesson_01_say_why():
    lines = compare.against_lesson01(
        _history(100, 380, 400), workers=2, use_gpu=False, baseline=_history(300, 640, 660), cores=2
    )
    assert lines[0] == (
        "Lesson 01's plain PyTorch trained 650 images/s in one process; this run trained 390 images/s "
        "with 2 worker(s) together: 0.60x lesson 01's."
    )
    assert lines[1].startswith("Why it is not faster here: the 2 workers share the 2 CPU core(s)")


def test_a_run_that_came_out_ahead_is_not_explained_away():
    lines = compare.against_lesson01(_history(700), workers=2, use_gpu=False, baseline=_history(650), cores=8)
    assert len(lines) == 1 and "1.08x" in lines[0]


def test_gpu_workers_are_said_to_bring_their_own_gpus():
    lines = compare.against_lesson01(
        _history(5000, 9000), workers=2, use_gpu=True, baseline=_history(4000, 4700)
    )
    assert "1.91x" in lines[0] and lines[1].startswith("Each of the 2 worker(s) has a GPU of its own")


def test_without_lesson_01_the_run_says_how_to_compare(tmp_path):
    assert compare.lesson01_history(tmp_path) is None
    lines = compare.against_lesson01(_history(300, 390), workers=2, use_gpu=False, baseline=pd.DataFrame())
    assert lines == [
        "This run trained 390 images/s (all workers together). Run lesson 01 on this machine to see it "
        "beside plain PyTorch."
    ]
    _history(1, 2).to_csv(tmp_path / "metrics.csv", index=False)
    assert compare.lesson01_history(tmp_path)["images_per_s"].tolist() == [1, 2]


def test_looking_for_lesson_01_creates_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_STORAGE", str(tmp_path / "storage"))
    assert compare.lesson01_history() is None
    assert not (tmp_path / "storage").exists(), "reading lesson 01's metrics must not create folders"
