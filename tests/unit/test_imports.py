"""The import graphs of ``course_utils`` and ``maintainer_tools`` have no cycles, ``course_utils`` never
imports the tools, and every module imports on its own.

A cycle between two modules works only while one side imports lazily inside a function, and
breaks the day someone moves that import to the top; it also says two modules share one job.
The graph counts every import, at module level or inside a function (lazy imports included), in
every spelling: ``import course_utils.x``, ``from course_utils import x``, ``from course_utils.x
import y``, relative imports. Importing ``a.b`` also runs ``a``, so it counts as both. A module's own
parent package runs before it anyway: it is an edge only when the module names it in an import
(``from maintainer_tools.bench import COMMANDS`` inside ``maintainer_tools.bench.report``).

``course_utils`` is what a learner's wheel holds: a ``maintainer_tools`` import anywhere in it (inside a
function too) would make a lesson need the tools, and a tool's module back in it (``course_utils/canary.py``)
would ship that tool again.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGE, TOOLS_PACKAGE = "course_utils", "maintainer_tools"
PACKAGES = (PACKAGE, TOOLS_PACKAGE)
# maintainer_tools' top-level modules (held to the folder below): course_utils imports none of them, under
# either package's name.
TOOLS = (
    "answered",
    "bench",
    "canary",
    "clean_data",
    "cluster",
    "docsite",
    "export",
    "fits",
    "publish",
    "run_course",
)


def module_name(path: Path, root: Path = REPO) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def package_modules(packages: tuple[str, ...] = PACKAGES, root: Path = REPO) -> dict[str, Path]:
    """Every module of the packages, by dotted name (packages by their ``__init__``)."""
    return {module_name(p, root): p for package in packages for p in sorted((root / package).rglob("*.py"))}


def _from_target(node: ast.ImportFrom, name: str, is_package: bool) -> str:
    """The module a ``from ... import`` reads from, a relative one resolved against module ``name``."""
    if not node.level:  # relative: from . import x, from .x import y, from .. import z
        return node.module or ""
    base = (name if is_package else name.rpartition(".")[0]).split(".")
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imported_names(tree: ast.AST, name: str, is_package: bool) -> set[str]:
    """Dotted names of everything ``tree`` (module ``name``) imports, wherever the import sits."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            target = _from_target(node, name, is_package)
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


def named_modules(tree: ast.AST, name: str, is_package: bool, modules: set[str]) -> set[str]:
    """The modules ``tree``'s imports name themselves, not the packages run on the way: ``import a.b`` names
    ``a.b``; ``from pkg import x`` names the submodule ``pkg.x`` when there is one, else ``pkg``."""

    def deepest(full: str) -> str | None:
        parts = full.split(".")
        return next((p for i in range(len(parts), 0, -1) if (p := ".".join(parts[:i])) in modules), None)

    found: set[str | None] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(deepest(alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            target = _from_target(node, name, is_package)
            found.update(deepest(f"{target}.{alias.name}") for alias in node.names)
    return {m for m in found if m}


def import_graph(packages: tuple[str, ...] = PACKAGES, root: Path = REPO) -> dict[str, set[str]]:
    """Module -> the package modules its imports run, its own parent packages left out unless named."""
    modules = package_modules(packages, root)
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        is_package = path.name == "__init__.py"
        names = imported_names(tree, name, is_package)
        parents = {".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)}
        # a parent package runs before its module: an edge only when the module imports from it by name
        implicit = parents - named_modules(tree, name, is_package, set(modules))
        graph[name] = resolve(names, set(modules)) - {name} - implicit
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


def tool_imports(tree: ast.AST, name: str, is_package: bool) -> list[str]:
    """What module ``name`` of course_utils imports of the tools, wherever the import sits: any
    ``maintainer_tools`` module, a tool under course_utils' name, or either named to ``importlib``."""
    names = imported_names(tree, name, is_package)
    for node in ast.walk(tree):  # importlib.import_module("..."), __import__("...")
        if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if called in ("import_module", "__import__") and isinstance(node.args[0].value, str):
                names.add(node.args[0].value)
    forbidden = (TOOLS_PACKAGE, *(f"{PACKAGE}.{tool}" for tool in TOOLS))
    return sorted(n for n in names if any(n == f or n.startswith(f + ".") for f in forbidden))


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
from .sub.train import main

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
        "course_utils.sub",
        "course_utils.sub.train",
        "course_utils.training",
    }
    names = imported_names(ast.parse(source), "course_utils.training", is_package=False)
    assert resolve(names, modules) - {"course_utils"} == modules - {"course_utils", "course_utils.training"}
    # relative to a package's __init__: ``from . import x`` stays inside that package
    inner = imported_names(ast.parse("from . import train"), "course_utils.sub", is_package=True)
    assert "course_utils.sub.train" in resolve(inner, modules)


def test_a_parent_package_is_an_edge_only_when_named():
    modules = {"pkg", "pkg.sub", "pkg.sub.common", "pkg.sub.report"}

    def edges(source: str) -> set[str]:
        tree = ast.parse(source)
        return named_modules(tree, "pkg.sub.report", False, modules)

    # from the package's own namespace (COMMANDS is defined in pkg/sub/__init__.py): pkg.sub runs by name
    assert edges("def f():\n    from pkg.sub import COMMANDS") == {"pkg.sub"}
    assert edges("from . import COMMANDS") == {"pkg.sub"}
    # a sibling module: pkg.sub runs on the way, as it does for any module of the package
    assert edges("from pkg.sub.common import COMMANDS") == {"pkg.sub.common"}
    assert edges("from pkg.sub import common") == {"pkg.sub.common"}
    assert edges("import pkg.sub.common") == {"pkg.sub.common"}


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


def test_a_package_and_its_module_importing_each_other_inside_functions_is_a_cycle(tmp_path):
    # bench/__init__.py's dispatcher imported bench.report in a function, and report took COMMANDS back
    # from the package in its own functions: a cycle, though neither import ran at import time.
    bench = tmp_path / "pkg" / "bench"
    bench.mkdir(parents=True)
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (bench / "__init__.py").write_text("COMMANDS = {}\ndef main():\n    from pkg.bench import report\n")
    (bench / "report.py").write_text("def render():\n    from pkg.bench import COMMANDS\n")
    assert find_cycle(import_graph(("pkg",), tmp_path)) == ["pkg.bench", "pkg.bench.report", "pkg.bench"]
    # the shape that replaced it: both import a small module of the package, which imports neither
    (bench / "common.py").write_text("COMMANDS = {}\n")
    (bench / "__init__.py").write_text(
        "from pkg.bench.common import COMMANDS\ndef main():\n    from pkg.bench import report\n"
    )
    (bench / "report.py").write_text("from pkg.bench.common import COMMANDS\n")
    assert find_cycle(import_graph(("pkg",), tmp_path)) is None


def test_the_tool_check_sees_every_way_of_importing_a_tool():
    source = """
import maintainer_tools.bench
from course_utils import canary
from . import export
import importlib

def lazy():
    from maintainer_tools.cluster import LocalCluster
    importlib.import_module("maintainer_tools.docsite")
    from course_utils import config
"""
    found = tool_imports(ast.parse(source), "course_utils.install", is_package=False)
    assert set(found) >= {
        "maintainer_tools.bench",
        f"{PACKAGE}.canary",  # a tool back under the learner's package
        f"{PACKAGE}.export",
        "maintainer_tools.cluster",
        "maintainer_tools.docsite",
    }
    assert not [n for n in found if n.startswith("course_utils.config")]


# --------------------------------------------------------------------------- the packages


def test_the_tools_list_is_the_tools_package():
    here = {p.stem for p in (REPO / TOOLS_PACKAGE).glob("*.py") if not p.stem.startswith("_")}
    here |= {p.name for p in (REPO / TOOLS_PACKAGE).iterdir() if (p / "__init__.py").is_file()}
    assert here == set(TOOLS)


def test_course_utils_never_imports_the_maintainers_tools():
    found = {}
    for name, path in package_modules((PACKAGE,)).items():
        tree = ast.parse(path.read_text(), filename=str(path))
        found[name] = tool_imports(tree, name, path.name == "__init__.py")
    found = {name: names for name, names in found.items() if names}
    assert not found, f"course_utils modules importing the maintainers' tools: {found}"
    inside = REPO / PACKAGE
    leftovers = [tool for tool in TOOLS if (inside / f"{tool}.py").exists() or (inside / tool).is_dir()]
    assert not leftovers, f"tools inside course_utils (maintainer_tools/ holds them): {leftovers}"


def test_neither_package_has_an_import_cycle():
    graph = import_graph()
    assert "course_utils.training" in graph and "maintainer_tools.bench.train" in graph
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


# Run in a fresh interpreter: load the third-party libraries the packages import once (torch and
# Ray cost seconds each), then fork one child per module that imports only that module, with no
# other course module loaded. A module that works only when another course module was imported
# first (or that joins a cycle at import time) fails in its own child; each child also says which
# maintainer_tools modules the import loaded. One plain ``python -c`` per module took over a minute
# on a 2-core machine; this takes seconds.
IMPORT_EACH = r"""
import importlib, json, os, sys, traceback
modules, external = sys.argv[1].split(","), sys.argv[2].split(",")
for name in external:
    try:
        importlib.import_module(name)
    except Exception:
        pass  # the child that needs it reports the failure
ours = ("course_utils", "maintainer_tools")
assert not any(m.split(".")[0] in ours for m in sys.modules)
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
        tools = sorted(m for m in sys.modules if m.split(".")[0] == "maintainer_tools")
        os.write(write, json.dumps({"message": message[-4000:], "tools": tools}).encode())
        os._exit(code)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        said = json.loads(pipe.read().decode(errors="replace") or '{"message": "", "tools": []}')
    _, status = os.waitpid(pid, 0)
    results[module] = {"status": status, **said}
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
    return {n for n in names if n.split(".")[0] not in PACKAGES}


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
    if module.split(".")[0] == PACKAGE:
        assert result["tools"] == [], f"import {module} loaded the maintainers' tools: {result['tools']}"


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
    assert results["json"]["status"] == 0 and results["json"]["tools"] == []


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
