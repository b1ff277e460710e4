"""The lessons' #@save cells and course_utils.lesson_code are one source: the module is the cells, exported."""

from __future__ import annotations

import dataclasses
import inspect

from course_utils import export, lesson_code


def test_lesson_code_is_exactly_the_lessons_saved_cells():
    problems = export.drift(export.saved_cells(), export.TARGET.read_text())
    assert not problems, "\n".join(problems) + "\nRun ./build.sh export (python -m course_utils.export)."


def test_lesson_02_saves_the_loop_every_worker_runs():
    cells = {name: cell for cell in export.saved_cells() for name in cell.names}
    cell = cells["train_loop_per_worker"]
    assert cell.lesson == "02_ray_train_migration.ipynb"
    assert cell.title.startswith("# 02. ")
    source = inspect.getsource(lesson_code.train_loop_per_worker)
    assert source.strip() in cell.code
    for call in ("ray.train.get_context()", "prepare_model(", "prepare_data_loader(", "ray.train.report("):
        assert call in source, f"lesson 02's loop no longer calls {call} itself"


def test_a_drifted_cell_is_named_with_its_function():
    cells = export.saved_cells()
    written = export.render(cells)
    edited = [
        dataclasses.replace(cell, code=cell.code.replace("every rank builds", "all ranks build"))
        for cell in cells
    ]
    problems = export.drift(edited, written)
    assert problems == [
        "train_loop_per_worker differs between 02_ray_train_migration.ipynb, cell "
        f"{cells[0].index} ({cells[0].title!r}) and lesson_code.py"
    ]
    assert export.drift(cells, written.replace("def train_loop_per_worker", "def renamed")) == [
        f"train_loop_per_worker (in {cells[0].where()}) is missing from lesson_code.py",
        "renamed is in lesson_code.py but in no #@save cell",
    ]
    assert export.drift(cells, written) == []


def test_export_check_exits_1_and_says_how_to_fix(tmp_path, monkeypatch, capsys):
    target = tmp_path / "lesson_code.py"
    monkeypatch.setattr(export, "TARGET", target)
    assert export.main(["--check"]) == 1
    assert "./build.sh export" in capsys.readouterr().out
    assert export.main([]) == 0
    assert target.read_text() == export.render(export.saved_cells())
    assert export.main(["--check"]) == 0
