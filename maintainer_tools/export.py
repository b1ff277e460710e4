"""The lessons' own Ray code, written once in the lessons and exported to ``course_utils``.

A code cell that contains a line ``#@save`` (d2l's convention) holds code a lesson teaches: the
learner reads and edits it there, and later lessons, tests and benchmarks import the same code from
``course_utils.lesson_code`` (the loops of lessons 02-04) or ``course_utils.lesson_inference``
(lesson 05's predictor), modules this exporter writes from those cells. The notebook is the
source; the module is generated. After editing a saved cell, run ``./build.sh export``. The same
command writes each lesson's Colab/Codespace links and install cell from pyproject.toml
(``maintainer_tools.publish.sync``).
``tests/unit/test_export.py`` fails, naming the lesson, the cell and the function, when the two
drift apart.

    python -m maintainer_tools.export          # write course_utils/lesson_*.py from the lessons
    python -m maintainer_tools.export --check  # exit 1, saying what drifted, when it is out of date
"""

from __future__ import annotations

import ast
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

MARKER = "#@save"
ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "course_utils"  # where the generated modules go: the package the lessons import
NOTEBOOKS = ROOT / "notebooks"

_DOC = '''"""{what}, from the lessons' ``#@save`` cells.

GENERATED: do not edit. Edit the cell in the lesson named above each definition,
then run ``./build.sh export`` (``maintainer_tools.export``);
``tests/unit/test_export.py`` fails while the two differ. Lines stay within 88
characters, as in the lessons.
"""

from __future__ import annotations
'''

# Each generated module: the lessons whose #@save cells it holds. A cell imports what it uses at its top, as
# Ray's docs write a loop (a learner copies the cell alone); the module imports each once, at its top. Two
# modules, so that a Ray Data inference actor that imports lesson 05's predictor imports neither Ray Train nor
# any other course module (tests/unit/test_imports.py).
MODULES: dict[str, tuple[tuple[str, ...], str]] = {
    "lesson_code.py": (("01", "02", "03", "04"), _DOC.format(what="The training loops lessons 01-04 teach")),
    "lesson_inference.py": (("05",), _DOC.format(what="Lesson 05's model actor and batch pipeline")),
}


@dataclass(frozen=True)
class SavedCell:
    """One ``#@save`` cell: where it is, and the code it holds (without the marker and title lines)."""

    lesson: str  # the notebook's file name
    index: int  # the cell's index in the notebook, 0-based
    title: str  # its first line, e.g. "# 02. The function every worker runs"
    code: str  # what it defines, without its imports
    imports: tuple[str, ...] = ()  # its import statements, one a line, as the cell writes them

    @property
    def names(self) -> list[str]:
        """The functions and classes the cell defines, in order."""
        tree = ast.parse(self.code)
        return [n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.ClassDef)]

    def where(self) -> str:
        return f"{self.lesson}, cell {self.index} ({self.title!r})"


def saved_cells(notebooks: Path = NOTEBOOKS) -> list[SavedCell]:
    """Every ``#@save`` cell of the numbered lessons, in lesson order."""
    cells = []
    for path in sorted(notebooks.glob("[0-9][0-9]_*.ipynb")):
        nb = json.loads(path.read_text())
        for index, cell in enumerate(nb["cells"]):
            if cell["cell_type"] != "code":
                continue
            source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
            lines = source.splitlines()
            if MARKER not in (line.strip() for line in lines):
                continue
            title = lines[0] if lines and lines[0].startswith("#") else ""
            code = "\n".join(line for line in lines[1 if title else 0 :] if line.strip() != MARKER)
            imports, code = _split_imports(code)
            cells.append(SavedCell(path.name, index, title, code.strip() + "\n", imports))
    return cells


def _split_imports(code: str) -> tuple[tuple[str, ...], str]:
    """(the import statements at the top of a cell, one each, the rest of its code)."""
    body = ast.parse(code).body
    head = []
    for node in body:
        if not isinstance(node, ast.Import | ast.ImportFrom):
            break
        head.append(node)
    if not head:
        return (), code
    rest = code.splitlines()[head[-1].end_lineno :]
    return tuple(ast.unparse(node) for node in head), "\n".join(rest)


def _import_block(statements: list[str]) -> str:
    """The cells' imports merged into one block, ordered as ruff's isort orders them (tests/unit/test_lint.py):
    the standard library, then the rest; ``import x`` lines before ``from x import ...``; each module once."""
    straight: set[str] = set()
    froms: dict[str, set[str]] = {}
    for statement in statements:
        node = ast.parse(statement).body[0]
        if isinstance(node, ast.Import):
            straight.update(ast.unparse(ast.Import(names=[alias])) for alias in node.names)
        else:
            assert isinstance(node, ast.ImportFrom) and node.module
            froms.setdefault(node.module, set()).update(
                a.name + (f" as {a.asname}" if a.asname else "") for a in node.names
            )

    def stdlib(module: str) -> bool:
        return module.split(".")[0] in sys.stdlib_module_names

    def by_type(name: str) -> tuple[int, str]:  # constants, classes, then the rest, as isort orders names
        return (0 if name.isupper() else 1 if name[0].isupper() else 2, name)

    sections = []
    for std in (True, False):
        lines = sorted((s for s in straight if stdlib(s.split()[1]) == std), key=lambda s: s.split()[1])
        lines += [
            f"from {m} import {', '.join(sorted(froms[m], key=by_type))}"
            for m in sorted(froms)
            if stdlib(m) == std
        ]
        if lines:
            sections.append("\n".join(lines))
    return "\n\n".join(sections)


def module_for(cell: SavedCell) -> str:
    """The generated module a saved cell goes to, by its lesson's number."""
    for name, (lessons, _) in MODULES.items():
        if cell.lesson[:2] in lessons:
            return name
    raise ValueError(
        f"{cell.where()} is a #@save cell, but no module in maintainer_tools.export.MODULES takes lesson {cell.lesson[:2]}"
    )


def render(cells: list[SavedCell], module: str = "lesson_code.py") -> str:
    """The text of generated ``module`` for the saved cells (those of its lessons)."""
    mine = [cell for cell in cells if module_for(cell) == module]
    parts = [
        MODULES[module][1],
        "\n" + _import_block([line for cell in mine for line in cell.imports]) + "\n",
    ]
    for cell in mine:
        parts.append(f"\n\n# From {cell.lesson}, cell {cell.index}:\n# {cell.title!r}.\n{cell.code.lstrip()}")
    return "".join(parts)


def drift(cells: list[SavedCell], written: str, module: str = "lesson_code.py") -> list[str]:
    """What differs between the lessons' cells and generated ``module`` as written, one line per definition."""
    if render(cells, module) == written:
        return []
    try:
        tree = ast.parse(written)
    except SyntaxError as error:
        return [f"{module} does not parse ({error}): run ./build.sh export"]
    defined = {
        n.name: ast.get_source_segment(written, n)
        for n in tree.body
        if isinstance(n, ast.FunctionDef | ast.ClassDef)
    }
    problems = []
    for cell in cells:
        if module_for(cell) != module:
            continue
        for node in ast.parse(cell.code).body:
            if not isinstance(node, ast.FunctionDef | ast.ClassDef):
                continue
            if node.name not in defined:
                problems.append(f"{node.name} (in {cell.where()}) is missing from {module}")
            elif defined.pop(node.name) != ast.get_source_segment(cell.code, node):
                problems.append(f"{node.name} differs between {cell.where()} and {module}")
    problems += [f"{name} is in {module} but in no #@save cell" for name in defined]
    return problems or [f"{module} differs from the lessons outside any definition (header or order)"]


def main(argv: list[str] | None = None, package: Path = PACKAGE) -> int:
    argv = sys.argv[1:] if argv is None else argv
    from maintainer_tools import publish

    if "--check" not in argv:
        for line in publish.sync(NOTEBOOKS, write=True):
            print(
                f"wrote {line.split(':')[0]}: its Colab/Codespace links and install cell from [tool.course]"
            )
    cells = saved_cells()
    if "--check" in argv:
        problems = publish.sync(NOTEBOOKS, write=False)
        for module in MODULES:
            path = package / module
            problems += drift(cells, path.read_text() if path.exists() else "", module)
        for line in problems:
            print(line)
        if problems:
            print(
                "Run ./build.sh export to write the lessons' #@save cells into course_utils, and "
                "pyproject.toml's [tool.course] into the lessons."
            )
        return 1 if problems else 0
    for module in MODULES:
        (package / module).write_text(render(cells, module))
        names = [name for cell in cells if module_for(cell) == module for name in cell.names]
        print(f"wrote {os.path.relpath(package / module, ROOT)}: {', '.join(names)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
