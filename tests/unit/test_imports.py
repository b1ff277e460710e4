"""The import graph of ``course_utils`` has no cycles, and every module imports on its own.

A cycle between two modules works only while one side imports lazily inside a function, and
breaks the day someone moves that import to the top; it also says two modules share one job.
The graph counts every import, at module level or inside a function (lazy imports included), in
every spelling: ``import course_utils.x``, ``from course_utils import x``, ``from course_utils.x
import y``, relative imports. Importing ``a.b`` also runs ``a``, so it counts as both.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = "course_utils"
ROOT = Path(__file__).resolve().parents[2] / PACKAGE


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def package_modules() -> dict[str, Path]:
    """Every module of the package, by dotted name (packages by their ``__init__``)."""
    return {module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def imported_names(tree: ast.AST, name: str, is_package: bool) -> set[str]:
    """Dotted names of everything ``tree`` (module ``name``) imports, wherever the import sits."""
    here = name if is_package else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from . import x, from .x import y, from .. import z
                base = here.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.add(target)
            # ``from pkg import x`` imports the submodule pkg.x when there is one
            found.update(f"{target}.{alias.name}" for alias in node.names)
    return found


def resolve(names: set[str], modules: set[str]) -> set[str]:
    """Map imported names onto package modules; importing ``a.b.c`` runs ``a``, ``a.b``, ``a.b.c``."""
    edges: set[str] = set()
    for full in names:
        parts = full.split(".")
        for i in range(1, len(parts) + 1):
            prefix = ".".join(parts[:i])
            if prefix in modules:
                edges.add(prefix)
    return edges


def import_graph() -> dict[str, set[str]]:
    modules = package_modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        names = imported_names(tree, name, path.name == "__init__.py")
        parents = {".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)}
        # a module's own parent packages run before it: not an edge worth reporting
        graph[name] = resolve(names, set(modules)) - {name} - parents
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle as ``[a, b, ..., a]``, or None. Depth-first search with an explicit path."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (cycle := visit(nxt, path)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start, [])):
            return cycle
    return None


# --------------------------------------------------------------------------- the finder itself


def test_cycle_finder_finds_a_cycle_and_names_it():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert find_cycle(graph) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set(), "d": {"a", "c"}}) is None
    assert find_cycle({"a": {"a"}}) == ["a", "a"]


def test_every_import_spelling_is_an_edge():
    source = """
import course_utils.plan
from course_utils import data
from course_utils.model import unwrap
from . import device
from .bench.train import main

def lazy():
    from course_utils.session import start_ray
"""
    modules = {
        "course_utils",
        "course_utils.plan",
        "course_utils.data",
        "course_utils.model",
        "course_utils.device",
        "course_utils.session",
        "course_utils.bench",
        "course_utils.bench.train",
        "course_utils.training",
    }
    names = imported_names(ast.parse(source), "course_utils.training", is_package=False)
    assert resolve(names, modules) - {"course_utils"} == modules - {"course_utils", "course_utils.training"}
    # relative to a package's __init__: ``from . import x`` stays inside that package
    inner = imported_names(ast.parse("from . import train"), "course_utils.bench", is_package=True)
    assert "course_utils.bench.train" in resolve(inner, modules)


def test_the_cycles_this_test_was_written_for_would_be_found():
    # faults -> session (alive_actors) -> training (per_worker_batch) -> faults, and
    # session <-> training (make_trainer's check_resources), as they were before the fix
    before = {
        "course_utils.faults": {"course_utils.session"},
        "course_utils.session": {"course_utils.training"},
        "course_utils.training": {"course_utils.faults", "course_utils.session"},
    }
    cycle = find_cycle(before)
    assert cycle is not None and cycle[0] == cycle[-1]


# --------------------------------------------------------------------------- the package


def test_course_utils_has_no_import_cycle():
    graph = import_graph()
    assert "course_utils.training" in graph and "course_utils.bench.train" in graph
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


# Run in a fresh interpreter: load the third-party libraries the package imports once (torch and
# Ray cost seconds each), then fork one child per module that imports only ``course_utils.<m>``,
# with no other ``course_utils`` module loaded. A module that works only when another course
# module was imported first (or that joins a cycle at import time) fails in its own child.
# One plain ``python -c`` per module took over a minute on a 2-core machine; this takes seconds.
IMPORT_EACH = r"""
import importlib, json, os, sys, traceback
modules, external = sys.argv[1].split(","), sys.argv[2].split(",")
for name in external:
    try:
        importlib.import_module(name)
    except Exception:
        pass  # the child that needs it reports the failure
assert not any(m == "course_utils" or m.startswith("course_utils.") for m in sys.modules)
results = {}
for module in modules:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            importlib.import_module(module)
            message, code = "", 0
        except BaseException:
            message, code = traceback.format_exc(), 1
        os.write(write, message.encode()[-4000:])
        os._exit(code)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        message = pipe.read().decode(errors="replace")
    _, status = os.waitpid(pid, 0)
    results[module] = {"status": status, "message": message}
print(json.dumps(results))
"""


def external_imports() -> set[str]:
    """Top-level third-party and standard-library packages the course modules import."""
    names: set[str] = set()
    for path in package_modules().values():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                names.add(node.module)
    return {n for n in names if n.split(".")[0] != PACKAGE}


IMPORTABLE = sorted(m for m in package_modules() if not m.endswith("__main__"))


@pytest.fixture(scope="module")
def imported_alone() -> dict[str, dict]:
    done = subprocess.run(
        [sys.executable, "-c", IMPORT_EACH, ",".join(IMPORTABLE), ",".join(sorted(external_imports()))],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("module", IMPORTABLE)
def test_each_module_imports_alone_in_a_fresh_interpreter(module, imported_alone):
    result = imported_alone[module]
    assert result["status"] == 0, f"import {module} failed on its own:\n{result['message']}"


def test_the_import_check_reports_a_broken_module(tmp_path):
    (tmp_path / "broken_mod.py").write_text("import no_such_module_here\n")
    done = subprocess.run(
        [sys.executable, "-c", IMPORT_EACH, "broken_mod,json", "json"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    results = json.loads(done.stdout.strip().splitlines()[-1])
    assert results["broken_mod"]["status"] != 0 and "no_such_module_here" in results["broken_mod"]["message"]
    assert results["json"]["status"] == 0


def modules_loaded_by(statement: str, candidates: tuple[str, ...]) -> list[str]:
    """Which of ``candidates`` a fresh interpreter has in ``sys.modules`` after ``statement``."""
    code = f"import sys; {statement}; print(sorted(m for m in {candidates!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().replace("'", '"'))


@pytest.mark.parametrize("module", ["course_utils.inference", "course_utils.lesson_inference"])
def test_inference_actors_import_neither_torchvision_nor_the_data_module(module):
    # A Ray Data inference actor unpickles lesson 05's BatchPredictor: from the lesson, by value (its
    # globals import course_utils.inference); from a bench or test, course_utils.lesson_inference.
    loaded = modules_loaded_by(f"import {module}", ("torchvision", "course_utils.data", "ray.train"))
    assert loaded == []


def test_import_ray_does_not_build_the_rfc3987_grammar():
    # Every Ray process imports ray; jsonschema >= 4.24 would add rfc3987_syntax (+1.4-2 s each here).
    assert modules_loaded_by("import ray", ("rfc3987_syntax", "lark")) == []
