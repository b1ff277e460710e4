"""Each name is taken from the module that defines it: no ``x as x`` re-exports in ``course_utils``, and the
lessons, the tools and the tests import a course_utils function or class from (or reach it through) the
module where it is defined, so a reader who follows a name lands on its definition, and ``show_source``'s
caption names the module the lesson imported.

Checked by importing: ``from course_utils.m import f`` and ``m.f`` (with ``m`` imported from course_utils)
both need ``f.__module__ == "course_utils.m"`` for every function or class of course_utils."""

from __future__ import annotations

import ast
import importlib
import json
import re
import types
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PY_FILES = sorted(
    p for folder in ("course_utils", "maintainer_tools", "tests") for p in (REPO / folder).rglob("*.py")
) + [REPO / "conftest.py"]
NOTEBOOKS = sorted((REPO / "notebooks").glob("0*.ipynb"))


def notebook_source(path: Path) -> str:
    cells = json.loads(path.read_text())["cells"]
    code = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    return "\n".join(line for line in code.splitlines() if not line.lstrip().startswith(("%", "!")))


def _defined_elsewhere(obj, module: types.ModuleType) -> str | None:
    """The course_utils module that defines ``obj`` when it is not ``module`` (functions and classes)."""
    if isinstance(obj, types.ModuleType) or not callable(obj):
        return None
    home = getattr(obj, "__module__", None) or ""
    return home if home.startswith("course_utils") and home != module.__name__ else None


def borrowed_names(source: str) -> list[str]:
    """Each course_utils function or class the source takes from a module that does not define it."""
    tree = ast.parse(source)
    modules: dict[str, types.ModuleType] = {}
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.ImportFrom) and node.level == 0):
            continue
        if not (node.module or "").startswith("course_utils"):
            continue
        module = importlib.import_module(node.module)
        for alias in node.names:
            if hasattr(module, alias.name):
                obj = getattr(module, alias.name)
            else:  # a submodule not imported yet: from course_utils import storage
                obj = importlib.import_module(f"{node.module}.{alias.name}")
            if isinstance(obj, types.ModuleType):
                modules[alias.asname or alias.name] = obj
            elif home := _defined_elsewhere(obj, module):
                found.append(f"from {node.module} import {alias.name} (defined in {home})")
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules:
            module = modules[node.value.id]
            home = _defined_elsewhere(getattr(module, node.attr, None), module)
            if home:  # a local variable of the same name has no such attribute: not counted
                found.append(f"{node.value.id}.{node.attr} (defined in {home})")
    return sorted(set(found))


@pytest.mark.parametrize("path", PY_FILES + NOTEBOOKS, ids=lambda p: str(p.relative_to(REPO)))
def test_names_come_from_their_defining_module(path):
    source = notebook_source(path) if path.suffix == ".ipynb" else path.read_text()
    assert borrowed_names(source) == []


def test_no_reexport_in_course_utils():
    spelled = re.compile(r"^\s*from \S+ import .*\b(\w+) as \1\b", re.M)
    found = [
        str(p.relative_to(REPO))
        for p in (REPO / "course_utils").rglob("*.py")
        if spelled.search(p.read_text())
    ]
    assert found == []


def test_the_check_finds_a_name_taken_from_the_wrong_module():
    # raydata imports check_columns from batch_format to use it: reaching it through raydata is borrowing
    assert borrowed_names("from course_utils.lesson03 import raydata\nraydata.check_columns(x)\n") == [
        "raydata.check_columns (defined in course_utils.core.batch_format)"
    ]
    assert borrowed_names("from course_utils.lesson03.raydata import check_columns\n") == [
        "from course_utils.lesson03.raydata import check_columns (defined in course_utils.core.batch_format)"
    ]
    assert borrowed_names("from course_utils.core.batch_format import check_columns\n") == []
