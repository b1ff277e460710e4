"""Every exercise is answerable from its lesson: each name its published solution uses (what it imports,
calls, or reads as an attribute) appears in the lesson before the exercise, or in the exercise itself.

A name defined by the solution, or one of Python's builtins, needs no introduction.
"""

from __future__ import annotations

import ast
import builtins
import json
import re

import pytest

from course_utils.exercises import checks
from maintainer_tools import answered
from maintainer_tools.harness.notebook_runs import LESSONS


def used_names(code: str) -> set[str]:
    """Names ``code`` uses but does not define: loaded names, attributes, imported names."""
    tree = ast.parse(code)
    defined, used = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.ClassDef | ast.AsyncFunctionDef):
            defined.add(node.name)
            defined.update(a.arg for a in node.args.args + node.args.kwonlyargs) if not isinstance(
                node, ast.ClassDef
            ) else None
        elif isinstance(node, ast.Name):
            (defined if isinstance(node.ctx, ast.Store) else used).add(node.id)
        elif isinstance(node, ast.Attribute):
            used.add(node.attr)
        elif isinstance(node, ast.ImportFrom):
            used.update(alias.name for alias in node.names)
            defined.update(alias.asname or alias.name for alias in node.names)
        elif isinstance(node, ast.Import):
            used.update(alias.name.split(".")[0] for alias in node.names)
            defined.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, ast.arg):
            defined.add(node.arg)
    return used - (defined - used_in_imports(tree)) - set(dir(builtins)) - {"self"}


def used_in_imports(tree: ast.AST) -> set[str]:
    """Imported names: they are both defined and used, and must still be introduced."""
    return {alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) for alias in node.names}


def _code(text: str) -> str:
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    return "\n".join(blocks) if blocks else text


CASES = [
    (lesson, index, exercise)
    for lesson in LESSONS
    for index, ids in answered.exercise_cells(json.loads(lesson.read_text()), answered.lesson_number(lesson))
    for exercise in ids
]


@pytest.mark.parametrize("lesson, index, exercise", CASES, ids=[c[2] for c in CASES])
def test_every_name_a_solution_uses_is_in_the_lesson_before_it(lesson, index, exercise):
    nb = json.loads(lesson.read_text())
    before = "\n".join("".join(cell["source"]) for cell in nb["cells"][: index + 1])
    missing = sorted(
        name
        for name in used_names(_code(checks.solution_text(exercise)))
        if not re.search(rf"\b{re.escape(name)}\b", before)
    )
    assert not missing, (
        f"exercise {exercise}'s solution uses {missing}, which {lesson.name} never shows before the exercise "
        "(cells up to and including it): introduce them there or say them in the exercise's text"
    )


def test_the_check_finds_a_name_the_lesson_never_shows():
    assert used_names(
        "from course_utils.core.batch_format import to_model_input\nx = to_model_input(y)\n"
    ) >= {
        "to_model_input",
        "y",
    }
    assert "z" not in used_names("def f(z):\n    return z.mean()\n")
    assert "mean" in used_names("def f(z):\n    return z.mean()\n")
