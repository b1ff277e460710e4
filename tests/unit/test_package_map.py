"""course_utils/README.md, the learner's map of the package, is true: each lesson's line lists exactly the
modules that lesson imports, and every module of the package has its one line."""

import ast
import json
import re

import pytest

from maintainer_tools.harness.notebook_runs import LESSONS
from tests.checkout import REPO_ROOT

PACKAGE = REPO_ROOT / "course_utils"
MAP = (PACKAGE / "README.md").read_text()


def lesson_modules(notebook) -> set[str]:
    """The course_utils modules a lesson's code cells import (``exercises.checks`` for a submodule)."""
    cells = json.loads(notebook.read_text())["cells"]
    source = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    source = "\n".join(line for line in source.splitlines() if not line.lstrip().startswith(("%", "!")))
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("course_utils"):
            parent = node.module.removeprefix("course_utils").lstrip(".")
            for alias in node.names:
                name = f"{parent}.{alias.name}" if parent else alias.name
                is_module = (PACKAGE / (name.replace(".", "/") + ".py")).exists()
                found.add(name if is_module else parent)
        # the install cell's importlib.import_module("course_utils.core.install")
        if (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", None) == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and str(node.args[0].value).startswith("course_utils.")
        ):
            found.add(node.args[0].value.removeprefix("course_utils."))
    return found


def mapped(lesson: str) -> set[str]:
    line = re.search(rf"^- \*\*{lesson}\*\* (.*)$", MAP, re.M)
    assert line, f"course_utils/README.md has no '- **{lesson}** ...' line"
    return {name.strip() for name in line[1].split(",")}


@pytest.mark.parametrize("notebook", LESSONS, ids=[p.stem[:2] for p in LESSONS])
def test_each_lesson_line_lists_what_the_lesson_imports(notebook):
    assert mapped(notebook.name[:2]) == lesson_modules(notebook)


def test_every_module_has_its_line():
    described = set(re.findall(r"^\| `([\w.]+)`", MAP, re.M))
    described |= {f"exercises.lesson0{n}" for n in range(1, 7)}  # the row `exercises.lesson01` ... `lesson06`
    modules = {
        ".".join(p.relative_to(PACKAGE).with_suffix("").parts)
        for p in PACKAGE.rglob("*.py")
        if p.name != "__init__.py"
    }
    assert modules == described


def test_the_package_all_names_every_top_level_module():
    """``course_utils.__all__`` (what ``from course_utils import *`` and a reader of ``__init__`` see)
    names each top-level module and package of the course, and nothing else."""
    import course_utils

    top = {p.stem for p in PACKAGE.glob("*.py") if p.name != "__init__.py"}
    top |= {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    assert sorted(course_utils.__all__) == sorted(top)
