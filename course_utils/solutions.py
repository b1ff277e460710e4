"""The published exercise solutions, and a lesson with them pasted in as a learner would.

Each exercise cell holds placeholder lines ``name = ...  # YOUR ANSWER ...``; the k-th
placeholder of lesson NN (in notebook order) is "Exercise NN.k", whose solution is the first
```python block under ``## Exercise NN.k`` in ``notebooks/solutions/NN_*.md``. The tests run
every lesson as shipped and then, in the same kernel, each exercise cell with its placeholders
replaced by the solutions: exactly what a learner who pastes the solution runs.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

from course_utils.config import REPO_ROOT


def solutions_dir() -> Path:
    """``notebooks/solutions`` of the checkout; outside one (Colab, a lesson alone), the copy installed
    with the package as ``course_utils._solutions`` (pyproject.toml's package-dir)."""
    checkout = REPO_ROOT / "notebooks" / "solutions"
    return checkout if checkout.is_dir() else Path(__file__).resolve().parent / "_solutions"


PLACEHOLDER = re.compile(r"^(?P<indent>[ \t]*)(?P<name>\w+) = \.\.\.[ \t]+# YOUR ANSWER\b.*$", re.M)
_HEADING = re.compile(r"^## Exercise (?P<id>\d\d\.\d+)\b", re.M)
_HINT = re.compile(r"^\*\*Hint:\*\*(?P<hint>.*?)(?:\n\s*\n|\Z)", re.M | re.S)
_CODE = re.compile(r"```python\n(?P<code>.*?)```", re.S)
ANSWERED_HEADING = "## Exercises answered with the published solutions (test run)"  # docsite drops from here
ANSWERED_TAG = "answered-exercise"


class SolutionsError(ValueError):
    """The solutions file and the lesson's exercise cells do not match one to one."""


def lesson_number(notebook: str | Path) -> str:
    """'03' for ``notebooks/03_ray_data_integration.ipynb``."""
    return Path(notebook).name[:2]


def _sections(lesson: str) -> tuple[str, dict[str, str]]:
    """(file name, ``{"NN.k": text under its heading}``) of ``notebooks/solutions/NN_*.md``, in order."""
    found = sorted(solutions_dir().glob(f"{lesson}_*.md"))
    if len(found) != 1:
        raise SolutionsError(f"Expected one notebooks/solutions/{lesson}_*.md, found {len(found)}.")
    text = found[0].read_text()
    headings = list(_HEADING.finditer(text))
    ends = [h.start() for h in headings[1:]] + [len(text)]
    return found[0].name, {h["id"]: text[h.end() : end] for h, end in zip(headings, ends, strict=True)}


def solutions(lesson: str) -> dict[str, str]:
    """``{"NN.k": code}`` from ``notebooks/solutions/NN_*.md``, in the file's order."""
    name, sections = _sections(lesson)
    result = {}
    for exercise, section in sections.items():
        code = _CODE.search(section)
        if code is None:
            raise SolutionsError(f"{name}: Exercise {exercise} has no ```python block.")
        result[exercise] = code["code"]
    return result


def _section(exercise: str) -> str:
    """The text under ``## Exercise NN.k`` in the lesson's solutions file, up to the next heading."""
    name, sections = _sections(exercise[:2])
    if exercise not in sections:
        raise SolutionsError(f"{name} has no '## Exercise {exercise}' section.")
    return sections[exercise]


def hint(exercise: str) -> str:
    """The ``**Hint:**`` paragraph of an exercise's solution section (a nudge, not the answer)."""
    match = _HINT.search(_section(exercise))
    if match is None:
        raise SolutionsError(f"Exercise {exercise} has no **Hint:** paragraph in its solutions file.")
    return " ".join(match["hint"].split())


def solution(exercise: str) -> str:
    """An exercise's published solution: its text without the hint (code block included)."""
    section = _HINT.sub("", _section(exercise), count=1)
    return section.split("\n", 1)[1].strip() if "\n" in section else section.strip()


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
