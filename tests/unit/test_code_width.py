"""The code a learner reads stays within 88 characters a line.

A lesson page of the site shows about 75 characters of a code block before it scrolls sideways,
JupyterLab beside its file browser about 90; a comment goes above the line it explains, a long
string is split into parts. This holds for the lessons' code cells, the modules generated from
their ``#@save`` cells (what a learner opens from a traceback) and the published solutions (what
a learner pastes into an exercise cell), and the code blocks in the lessons' prose.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from course_utils.exercises.checks import solutions_dir
from maintainer_tools import export
from maintainer_tools.harness.notebook_runs import LESSONS

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


FENCED = re.compile(r"```\w*\n(.*?)```", re.S)


def lesson_code(lesson: Path) -> list[tuple[str, str]]:
    """(where, code) for each code cell of ``lesson`` and each fenced block of its markdown."""
    found = []
    for index, cell in enumerate(json.loads(lesson.read_text())["cells"]):
        text = "".join(cell["source"])
        blocks = [text] if cell["cell_type"] == "code" else FENCED.findall(text)
        found += [(f"{lesson.name} cell {index}", block) for block in blocks]
    return found


@pytest.mark.parametrize("lesson", LESSONS, ids=[p.stem for p in LESSONS])
def test_lesson_code_cells_and_the_code_in_their_prose(lesson: Path):
    long = [line for where, code in lesson_code(lesson) for line in too_long(code, where)]
    assert not long, "lines over 88 characters (put a comment above its line):\n" + "\n".join(long)


@pytest.mark.parametrize("module", sorted(export.MODULES))
def test_generated_modules(module: str):
    path = export.PACKAGE / module
    assert not too_long(path.read_text(), module)


def test_published_solutions():
    long = []
    for path in sorted(solutions_dir().glob("*.md")):
        for block in FENCED.findall(path.read_text()):
            long += too_long(block, path.name)
    assert not long, "\n".join(long)
