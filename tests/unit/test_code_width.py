"""The code a learner reads stays within 88 characters a line.

A lesson page of the site shows about 75 characters of a code block before it scrolls sideways,
JupyterLab beside its file browser about 90; a comment goes above the line it explains, a long
string is split into parts. This holds for the lessons' code cells, the modules generated from
their ``#@save`` cells (what a learner opens from a traceback) and the published solutions (what
a learner pastes into an exercise cell).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from course_utils import export
from course_utils.solutions import solutions_dir
from tests.notebook_runs import LESSONS

WIDTH = 88


def too_long(text: str, where: str) -> list[str]:
    """``where:line: text`` for each line of ``text`` longer than WIDTH characters."""
    return [
        f"{where}:{n}: ({len(line)}) {line.strip()[:60]}"
        for n, line in enumerate(text.splitlines(), 1)
        if len(line) > WIDTH
    ]


def test_the_rule_itself():
    assert too_long("x = 1\n" + "y" * 89, "here") == ["here:2: (89) " + "y" * 60]
    assert too_long("z" * 88, "here") == []


@pytest.mark.parametrize("lesson", LESSONS, ids=[p.stem for p in LESSONS])
def test_lesson_code_cells(lesson: Path):
    nb = json.loads(lesson.read_text())
    long = []
    for index, cell in enumerate(nb["cells"]):
        if cell["cell_type"] == "code":
            long += too_long("".join(cell["source"]), f"{lesson.name} cell {index}")
    assert not long, "lines over 88 characters (put a comment above its line):\n" + "\n".join(long)


@pytest.mark.parametrize("module", sorted(export.MODULES))
def test_generated_modules(module: str):
    path = export.PACKAGE / module
    assert not too_long(path.read_text(), module)


def test_published_solutions():
    long = []
    for path in sorted(solutions_dir().glob("*.md")):
        for block in re.findall(r"```python\n(.*?)```", path.read_text(), re.S):
            long += too_long(block, path.name)
    assert not long, "\n".join(long)
