"""Lessons 02-03 compare their fit with lesson 01's plain PyTorch, in sentences computed from the figures."""

import pandas as pd

from course_utils.core import compare, history, storage


def _history(*rates):
    return pd.DataFrame({"epoch": range(len(rates)), "images_per_s": rates})


def test_two_cpu_workers_slower_than_lesson_01_say_why():
    lines = compare.against_lesson01(
        _history(100, 380, 400), None, workers=2, use_gpu=False, baseline=_history(300, 640, 660), cores=2
    )
    assert lines[0] == (
        "Lesson 01's plain PyTorch trained 650 images/s in one process; this run trained 390 images/s "
        "with 2 worker(s) together: 0.60x lesson 01's."
    )
    assert lines[1].startswith("Why it is not faster here: the 2 workers share the 2 CPU core(s)")


def test_two_cpu_workers_level_with_lesson_01_say_why():
    lines = compare.against_lesson01(
        _history(125), None, workers=2, use_gpu=False, baseline=_history(123), cores=2
    )
    assert "1.02x" in lines[0] and lines[1].startswith("Why it is not faster here")


def test_a_run_that_came_out_ahead_is_not_explained_away():
    lines = compare.against_lesson01(
        _history(700), None, workers=2, use_gpu=False, baseline=_history(650), cores=8
    )
    assert len(lines) == 1 and "1.08x" in lines[0]


def test_gpu_workers_are_said_to_bring_their_own_gpus():
    lines = compare.against_lesson01(
        _history(5000, 9000), None, workers=2, use_gpu=True, baseline=_history(4000, 4700)
    )
    assert "1.91x" in lines[0] and lines[1].startswith("Each of the 2 worker(s) has a GPU of its own")


def test_without_lesson_01_the_run_says_how_to_compare(tmp_path):
    store = storage.Storage(str(tmp_path), "unit")
    assert compare.lesson01_history(store) is None
    lines = compare.against_lesson01(
        _history(300, 390), None, workers=2, use_gpu=False, baseline=pd.DataFrame()
    )
    assert lines == [
        "This run trained 390 images/s (all workers together). Run lesson 01 on this machine to see it "
        "beside plain PyTorch."
    ]
    _history(1, 2).to_csv(store.local_output_dir(compare.LESSON01_OUTPUT) / "metrics.csv", index=False)
    assert compare.lesson01_history(store)["images_per_s"].tolist() == [1, 2]


def test_looking_for_lesson_01_creates_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_STORAGE", str(tmp_path / "storage"))
    assert compare.lesson01_history(storage.resolve()) is None
    assert not (tmp_path / "storage").exists(), "reading lesson 01's metrics must not create folders"


def _run(*rates, workers=2):
    return pd.DataFrame({"epoch": range(len(rates)), "images_per_s": rates, "world_size": workers})


def test_lesson_03_beside_lesson_02_says_when_the_data_is_not_the_bottleneck():
    lines = compare.against_lesson02(_history(200, 300, 310), _run(250, 290, 300), what="lesson 03's fit")
    assert lines[0] == (
        "Lesson 02's fit, fed by a PyTorch DataLoader (2 worker(s)), trained 295 images/s; lesson 03's fit "
        "trained 305 images/s: 1.03x (each the median of the epochs after the first)."
    )
    assert lines[1].startswith("Within 10% of each other: the training step, not the data, sets the pace")


def test_a_clear_difference_is_not_explained_away_and_no_run_says_how():
    assert len(compare.against_lesson02(_history(500, 600), _run(250, 300))) == 1
    slower = compare.against_lesson02(_history(100, 110), _run(250, 190))
    assert len(slower) == 2 and slower[1].startswith("Slower here: on one machine Ray Data's read tasks run")
    assert compare.against_lesson02(_history(300), None) == [
        "Run lesson 02 with this storage to see this run beside its DataLoader-fed fit."
    ]


def test_lesson_02s_run_is_read_from_the_learners_storage(tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_STORAGE", str(tmp_path / "storage"))
    monkeypatch.setenv("COURSE_LEARNER", "tester")
    assert compare.lesson02_history(storage.resolve()) is None

    fs, folder = history.run_folder(*storage.resolve().for_ray(), storage.LESSON02_RUN)
    fs.create_dir(folder, recursive=True)
    with fs.open_output_stream(f"{folder}/{history.REPORT_LOG}") as stream:
        stream.write(b'[{"epoch": 0, "images_per_s": 290.0, "world_size": 2}]')
    assert compare.lesson02_history(storage.resolve())["images_per_s"].tolist() == [290.0]
