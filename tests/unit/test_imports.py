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
    "checkout",
    "clean_data",
    "cluster",
    "docsite",
    "export",
    "fits",
    "harness",
    "publish",
    "run_course",
    "run_tests",
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
import course_utils.core.plan
from course_utils.core import data
from course_utils.core.model import unwrap
from . import device
from .sub.train import main

def lazy():
    from course_utils.core.session import start_ray
"""
    modules = {
        "course_utils",
        "course_utils.core",
        "course_utils.core.plan",
        "course_utils.core.data",
        "course_utils.core.model",
        "course_utils.core.device",
        "course_utils.core.session",
        "course_utils.core.sub",
        "course_utils.core.sub.train",
        "course_utils.core.training",
    }
    names = imported_names(ast.parse(source), "course_utils.core.training", is_package=False)
    assert resolve(names, modules) - {"course_utils", "course_utils.core"} == modules - {
        "course_utils",
        "course_utils.core",
        "course_utils.core.training",
    }
    # relative to a package's __init__: ``from . import x`` stays inside that package
    inner = imported_names(ast.parse("from . import train"), "course_utils.core.sub", is_package=True)
    assert "course_utils.core.sub.train" in resolve(inner, modules)


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
        "course_utils.lesson04.faults": {"course_utils.core.session"},
        "course_utils.core.session": {"course_utils.core.training"},
        "course_utils.core.training": {"course_utils.lesson04.faults", "course_utils.core.session"},
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
    from course_utils.core import config
"""
    found = tool_imports(ast.parse(source), "course_utils.install", is_package=False)
    assert set(found) >= {
        "maintainer_tools.bench",
        f"{PACKAGE}.canary",  # a tool back under the learner's package
        f"{PACKAGE}.export",
        "maintainer_tools.cluster",
        "maintainer_tools.docsite",
    }
    assert not [n for n in found if n.startswith("course_utils.core.config")]


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


# Which rooms of course_utils each room may import (course_utils/README.md, "The rooms"): the arrows go down only.
MAY_IMPORT = {
    "internals": {"internals"},
    "core": {"core", "internals"},
    **{f"lesson0{n}": {f"lesson0{n}", "core", "internals"} for n in (3, 4, 5, 6)},
    "exercises": {"exercises", "core", "internals", "lesson03", "lesson04", "lesson05", "lesson06"},
    "lesson_code": set(),
    "lesson_inference": set(),
}


def test_each_room_imports_only_the_rooms_below_it_and_never_the_generated_code():
    """Every import of the package's own modules, in every spelling and inside functions too (the same graph
    as the cycle check), goes down a layer or stays in its room; none reaches lesson_code or lesson_inference
    (a lesson passes its loop in). ``course_utils`` itself, the package's face, runs nothing."""

    def room(module: str) -> str | None:
        return module.split(".")[1] if module.count(".") else None

    wrong = [
        f"{module} imports {target}"
        for module, targets in import_graph((PACKAGE,)).items()
        if room(module)
        for target in sorted(targets)
        if room(target) and room(target) not in MAY_IMPORT[room(module)]
    ]
    assert not wrong, "imports against the layers (course_utils/README.md):\n" + "\n".join(wrong)


def test_neither_package_has_an_import_cycle():
    graph = import_graph()
    assert "course_utils.core.training" in graph and "maintainer_tools.bench.train" in graph
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


def test_lesson_05s_actors_import_nothing_of_ray_train_or_the_course():
    # A Ray Data inference actor unpickles lesson 05's BatchPredictor: from the lesson by value, from a bench
    # or test from course_utils.lesson_inference. It builds lesson 01's model (torchvision) from the
    # checkpoint, and needs neither Ray Train nor any course_utils module besides its own.
    others = [f"course_utils.core.{m}" for m in ("batch_format", "checkpoints", "config", "data", "device")]
    others += ["course_utils.core.model", "course_utils.core.progress", "course_utils.lesson05.inference"]
    loaded = modules_loaded_by("import course_utils.lesson_inference", ("ray.train", *others))
    assert loaded == []


def test_import_ray_does_not_build_the_rfc3987_grammar():
    # Every Ray process imports ray; jsonschema >= 4.24 would add rfc3987_syntax (+1.4-2 s each here).
    assert modules_loaded_by("import ray", ("rfc3987_syntax", "lark")) == []


def test_the_package_imports_its_own_modules_at_the_top():
    """Wiring in the open: a reader sees every arrow of a course_utils module in its first lines. An import of
    the package's own modules inside a function hid a cycle or an arrow nobody drew; none is left."""
    inside = []
    for path in sorted((REPO / PACKAGE).rglob("*.py")):
        for fn in ast.walk(ast.parse(path.read_text())):
            if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(fn):
                names = [node.module or ""] if isinstance(node, ast.ImportFrom) else []
                names += [a.name for a in node.names] if isinstance(node, ast.Import) else []
                if any(n == PACKAGE or n.startswith(PACKAGE + ".") for n in names):
                    inside.append(f"{path.relative_to(REPO)}:{node.lineno} in {fn.name}()")
    assert not inside, "move these imports to the module's top:\n" + "\n".join(inside)
