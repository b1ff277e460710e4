"""The lessons' #@save cells and the generated modules are one source: each module is its lessons' cells, exported."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from course_utils import lesson_code, lesson_inference
from maintainer_tools import export


@pytest.mark.parametrize("module", list(export.MODULES))
def test_each_generated_module_is_exactly_its_lessons_saved_cells(module):
    problems = export.drift(export.saved_cells(), (export.PACKAGE / module).read_text(), module)
    assert not problems, "\n".join(problems) + "\nRun ./build.sh export (python -m maintainer_tools.export)."


def _cells_by_name() -> dict[str, export.SavedCell]:
    return {name: cell for cell in export.saved_cells() for name in cell.names}


@pytest.mark.parametrize(
    "name, lesson, module, calls",
    [
        (
            "train_loop_per_worker",
            "02",
            lesson_code,
            ["ray.train.get_context()", "prepare_model(", "prepare_data_loader(", "ray.train.report("],
        ),
        ("train_loop_ray_data", "03", lesson_code, ["ray.train.get_dataset_shard(", "iter_torch_batches("]),
        ("train_loop_resumable", "04", lesson_code, ["ray.train.get_checkpoint()", "fault(rank=rank"]),
        ("BatchPredictor", "05", lesson_inference, ["checkpoint.as_directory()", "def __call__"]),
    ],
)
def test_each_lesson_writes_its_own_ray_code(name, lesson, module, calls):
    cell = _cells_by_name()[name]
    assert cell.lesson.startswith(lesson + "_") and cell.title.startswith("# ")
    source = inspect.getsource(getattr(module, name))
    assert source.strip() in cell.code
    for call in calls:
        assert call in source, f"lesson {lesson}'s {name} no longer calls {call} itself"


def test_a_drifted_cell_is_named_with_its_function():
    cells = export.saved_cells()
    at = next(n for n, cell in enumerate(cells) if "train_loop_per_worker" in cell.names)
    first = cells[at]  # lesson 02's loop
    written = export.render(cells)
    edited = list(cells)
    edited[at] = dataclasses.replace(
        first, code=first.code.replace("the number of workers", "how many workers there are")
    )
    assert export.drift(edited, written) == [
        f"train_loop_per_worker differs between {first.where()} and lesson_code.py"
    ]
    assert export.drift(cells, written.replace("def train_loop_per_worker", "def renamed")) == [
        f"train_loop_per_worker (in {first.where()}) is missing from lesson_code.py",
        "renamed is in lesson_code.py but in no #@save cell",
    ]
    assert export.drift(cells, written) == []


def test_a_saved_cell_of_a_lesson_no_module_takes_is_an_error():
    cell = dataclasses.replace(export.saved_cells()[0], lesson="09_new_lesson.ipynb")
    with pytest.raises(ValueError, match="no module in maintainer_tools.export.MODULES takes lesson 09"):
        export.module_for(cell)


def test_export_check_exits_1_and_says_how_to_fix(tmp_path, capsys):
    assert export.main(["--check"], package=tmp_path) == 1
    assert "./build.sh export" in capsys.readouterr().out
    assert export.main([], package=tmp_path) == 0
    for module in export.MODULES:
        assert (tmp_path / module).read_text() == export.render(export.saved_cells(), module)
    assert export.main(["--check"], package=tmp_path) == 0
