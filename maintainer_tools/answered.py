"""A lesson with the published exercise solutions pasted in, as a learner who pastes them would run it.

Each exercise cell holds placeholder lines ``name = ...  # YOUR ANSWER ...``; the k-th placeholder
of lesson NN (in notebook order) is "Exercise NN.k", whose solution is the first ```python block
under ``## Exercise NN.k`` in ``notebooks/solutions/NN_*.md`` (``course_utils.exercises.checks``, which
also gives a learner ``hint`` and ``solution``). The tests run every lesson as shipped and then, in the
same kernel, each exercise cell with its placeholders replaced by the solutions
(``answered_notebook``); the site drops those answered cells (``ANSWERED_HEADING``).
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

from course_utils.exercises.checks import SolutionsError, solutions

PLACEHOLDER = re.compile(r"^(?P<indent>[ \t]*)(?P<name>\w+) = \.\.\.[ \t]+# YOUR ANSWER\b.*$", re.M)
ANSWERED_HEADING = "## Exercises answered with the published solutions (test run)"  # docsite drops from here
ANSWERED_TAG = "answered-exercise"


def lesson_number(notebook: str | Path) -> str:
    """'03' for ``notebooks/03_ray_data_integration.ipynb``."""
    return Path(notebook).name[:2]


def exercise_cells(nb: dict[str, Any], lesson: str) -> list[tuple[int, list[str]]]:
    """``(cell index, ["NN.k", ...])`` of each code cell with placeholders, numbered in order."""
    cells, k = [], 0
    for index, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "code":
            continue
        found = PLACEHOLDER.findall(_source(cell))
        if found:
            ids = [f"{lesson}.{k + j + 1}" for j in range(len(found))]
            k += len(found)
            cells.append((index, ids))
    return cells


def answer(source: str, answers: list[str]) -> str:
    """``source`` with its placeholder lines replaced, in order, by ``answers`` (indented alike)."""
    placeholders = list(PLACEHOLDER.finditer(source))
    if len(placeholders) != len(answers):
        raise SolutionsError(f"{len(placeholders)} placeholder(s) but {len(answers)} answer(s).")
    out, last = [], 0
    for match, code in zip(placeholders, answers, strict=True):
        indent = match["indent"]
        body = "\n".join(indent + line if line.strip() else line for line in code.rstrip("\n").splitlines())
        out += [source[last : match.start()], body]
        last = match.end()
    return "".join(out + [source[last:]])


def answered_notebook(path: str | Path) -> dict[str, Any]:
    """The lesson as shipped, then each exercise cell again with its published solution pasted in.

    The appended cells carry the tag ``answered-exercise`` and ``metadata.exercises`` (their ids).
    Raises ``SolutionsError`` when the lesson's placeholders and the solutions file disagree.
    """
    import nbformat

    nb = nbformat.read(str(path), as_version=4)
    lesson = lesson_number(path)
    published = solutions(lesson)
    cells = exercise_cells(nb, lesson)
    ids = [i for _, group in cells for i in group]
    if ids != list(published):
        raise SolutionsError(
            f"{Path(path).name} has exercises {ids} but notebooks/solutions/{lesson}_*.md solves {list(published)}."
        )
    answered = copy.deepcopy(nb)
    answered.cells.append(nbformat.v4.new_markdown_cell(ANSWERED_HEADING))
    for index, group in cells:
        source = answer(_source(nb.cells[index]), [published[i] for i in group])
        cell = nbformat.v4.new_code_cell(source)
        cell.metadata["tags"] = [ANSWERED_TAG]
        cell.metadata["exercises"] = group
        answered.cells.append(cell)
    return answered


def unanswered(nb: dict[str, Any]) -> list[str]:
    """Exercise ids among an executed answered notebook's cells whose check did not print "correct"."""
    missing = []
    for cell in nb["cells"]:
        if ANSWERED_TAG not in cell.get("metadata", {}).get("tags", []):
            continue
        text = "".join(
            o.get("text", "") if o.get("output_type") == "stream" else "" for o in cell.get("outputs", [])
        )
        missing += [i for i in cell["metadata"]["exercises"] if f"Exercise {i}: correct" not in text]
    return missing


def _source(cell: dict[str, Any]) -> str:
    source = cell["source"]
    return source if isinstance(source, str) else "".join(source)
