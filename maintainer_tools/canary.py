"""``./build.sh canary``: the course on the newest Ray (and the newest other direct dependencies).

Run with the canary venv's Python (``build.sh canary`` makes ``.venv-canary``), from the repo root:

1. install ``requirements.txt`` and ``requirements-dev.txt`` (the lessons' packages and the tools the tests
   run on) with every ``==`` pin relaxed to ``>=`` (torch and torchvision stay pinned: they come from this
   machine's disk), no lock, upgrading everything to the newest that fits;
2. ``pytest tests/unit``;
3. every lesson (``python -m maintainer_tools.run_course``, which attempts each one whatever the others did),
   then every lesson alone in a fresh Colab-shaped venv (``tests/colab_tier``, ``--no-colab`` skips it);
4. the benches (``python -m maintainer_tools.bench <name>``), each figure beside the pinned course's
   (``maintainer_tools/bench/pinned.json``).

It ends with ONE Markdown table (also appended to ``$GITHUB_STEP_SUMMARY`` when set) and exits 1 when
the install, a unit test, a lesson or a bench failed. Bench figures that moved are shown, never judged.

This module imports only the standard library at the top, and ``course_utils.core.install``'s ``normalise``
(standard library only too): it runs before anything is installed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from course_utils.core.install import normalise

REPO_ROOT = Path(__file__).resolve().parent.parent
PINNED = Path(__file__).resolve().parent / "bench" / "pinned.json"
# Every bench (maintainer_tools.bench.common.COMMANDS, written out: that package imports the course, this
# module only the standard library).
BENCHES = (
    "train",
    "ingest",
    "checkpoint",
    "validation",
    "recovery",
    "inference",
    "startup",
    "workshop",
    "hosts",
    "install",
)
# They must come from this machine's disk (pip's config caps them there): never relaxed.
KEEP_PINNED = frozenset({"torch", "torchvision"})
# Pins held on purpose, for a reason no Ray release changes: relaxed only with --relax-all, and shown
# in the table either way. Dependabot's weekly pull request still offers the newer version.
HELD = {
    "jsonschema": "4.24+ imports rfc3987-syntax, +1.5-2 s in every Ray process (docs/design.md); "
    "with it relaxed, test_imports fails",
}
TABLE_HEADER = "| step | pinned | canary | result |"
# What the canary installs, relaxed: the learner's requirements and the maintainers' tools (pytest for
# the unit tests, nbmake, ...), both as the pinned course has them.
REQUIREMENT_FILES = ("requirements.txt", "requirements-dev.txt")
INSTALL_STEP = "install (requirements.txt + requirements-dev.txt, == relaxed to >=)"

_REQUIREMENT = re.compile(
    r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)(?P<extras>\[[^\]]*\])?\s*==\s*(?P<version>[^\s;#]+)"
)
_BENCH_LINE = re.compile(r"^(?P<name>[a-z][a-z0-9_]*): (?P<value>\S.*)$")
_PYTEST_COUNT = re.compile(r"(\d+) (passed|failed|errors?|skipped|deselected|xfailed|xpassed)")
_ERROR_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit|Failure)\b.*")


@dataclass
class Step:
    """One row of the canary's table."""

    name: str
    ok: bool | None  # None: not run
    detail: str = ""
    pinned: str = ""
    canary: str = ""


@dataclass
class Lesson:
    """One lesson row of run_course's table."""

    name: str
    seconds: float | None
    ok: bool
    error: str = ""


@dataclass
class Report:
    """Everything the canary found, in the order it ran."""

    steps: list[Step] = field(default_factory=list)
    upgrades: list[str] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return any(step.ok is False for step in self.steps)


# ---------------------------------------------------------------- pure: requirements and output parsing


def relax_requirements(text: str, keep: frozenset[str] = KEEP_PINNED) -> str:
    """``requirements.txt`` with each ``name==x`` turned into ``name>=x`` (the newest that installs,
    never older than the course's pin), except the packages in ``keep``. Comments stay."""
    out = []
    for line in text.splitlines():
        match = _REQUIREMENT.match(line.strip())
        if match and normalise(match["name"]) not in keep:
            line = f"{match['name']}{match['extras'] or ''}>={match['version']}"
        out.append(line)
    return "\n".join(out) + "\n"


def pinned_versions(text: str) -> dict[str, str]:
    """``{normalised name: version}`` of the ``==`` pins in a requirements file."""
    pins = {}
    for line in text.splitlines():
        match = _REQUIREMENT.match(line.strip())
        if match:
            pins[normalise(match["name"])] = match["version"]
    return pins


def first_error(output: str) -> str:
    """The line that says what went wrong: pip's first ``ERROR:``, else a traceback's last
    ``SomethingError: ...`` line, else the last non-empty line."""
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    for line in lines:
        if line.startswith("ERROR:"):
            return _short(line)
    errors = [ln for ln in lines if _ERROR_LINE.match(ln)]
    return _short(errors[-1] if errors else (lines[-1] if lines else "no output"))


def parse_pytest(output: str, returncode: int, name: str = "unit tests (tests/unit)") -> Step:
    """pytest's outcome: its closing counts and, when something failed, the first failing test."""
    counts = ""
    for line in reversed(output.splitlines()):
        if _PYTEST_COUNT.search(line) and re.search(r" in [\d.]+s", line):
            counts = ", ".join(f"{n} {what}" for n, what in _PYTEST_COUNT.findall(line))
            break
    failing = next(
        (ln.strip() for ln in output.splitlines() if re.match(r"^(FAILED|ERROR) \S+::", ln.strip())), ""
    )
    ok = returncode == 0
    detail = counts or f"pytest exited {returncode}"
    if not ok:
        detail += f"; first: {failing}" if failing else f"; {first_error(output)}"
    return Step(name, ok, _short(detail, 300))


def parse_course_table(output: str) -> list[Lesson]:
    """The lesson rows of ``run_course``'s closing table (``run_course.format_table``)."""
    lessons = []
    rows = output[output.rfind("| lesson | seconds |") :].splitlines()[2:] if "| lesson |" in output else []
    for row in rows:
        if not row.startswith("| "):
            break
        cells = [c.strip() for c in row.strip().strip("|").split(" | ")]
        name, seconds, result, error = (cells + ["", "", ""])[:4]
        lessons.append(Lesson(name, float(seconds) if seconds else None, result == "ok", error))
    return lessons


def parse_bench(output: str) -> dict[str, float | str]:
    """A bench's ``name: value`` lines (numbers as floats), in order: the last is its ratio."""
    values: dict[str, float | str] = {}
    for line in output.splitlines():
        match = _BENCH_LINE.match(line.strip())
        if match:
            raw = match["value"].strip()
            try:
                values[match["name"]] = float(raw.rstrip("x%"))
            except ValueError:
                values[match["name"]] = raw
    return values


def bench_steps(
    name: str, pinned: dict, values: dict[str, float | str], error: str | None = None
) -> list[Step]:
    """Rows for one bench: each pinned figure beside the canary's, and the bench's own last line
    (its ratio) when the pinned file does not name it. A failed bench is one failed row."""
    if error is not None:
        return [Step(f"bench {name}", False, error)]
    figures: dict = dict(pinned.get("figures", {}))
    measured = f" (Ray {pinned['ray']}, {pinned['measured']})" if "ray" in pinned else ""
    numbers = [key for key, value in values.items() if isinstance(value, float)]
    if numbers and numbers[-1] not in figures:
        figures[numbers[-1]] = None
    steps = []
    for figure, then in figures.items():
        now = values.get(figure)
        change = ""
        if isinstance(now, float) and then:
            change = f"{now / then - 1:+.0%} vs pinned{measured}"
        elif now is None:
            change = "not printed by the bench"
        steps.append(
            Step(
                f"bench {name}: {figure}",
                True if now is not None else None,
                change,
                "" if then is None else _number(then),
                "" if now is None else _number(now),
            )
        )
    return steps


def format_table(report: Report) -> str:
    """The canary's one table (Markdown): install, unit tests, each lesson, each bench figure."""
    rows = [TABLE_HEADER, "|---|---:|---:|---|"]
    for step in report.steps:
        result = {True: "ok", False: "FAILED", None: "not run"}[step.ok]
        detail = f"{result}: {step.detail}" if step.detail else result
        rows.append(f"| {step.name} | {step.pinned} | {step.canary} | {detail.replace('|', '/')} |")
    failed = [step.name for step in report.steps if step.ok is False]
    verdict = f"**canary RED**: {len(failed)} failed ({', '.join(failed)})" if failed else "**canary green**"
    return "\n".join([*rows, "", verdict])


def _number(value: float) -> str:
    value = float(value)
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}" if abs(value) < 10 else f"{value:.1f}"


def _short(text: str, limit: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


# ---------------------------------------------------------------- running things


def run(
    command: Sequence[str], log: Path, timeout_s: float, env: dict[str, str] | None = None
) -> tuple[int, str]:
    """Run ``command`` from the repo root, echoing its output live and keeping it in ``log``;
    its whole process group is killed after ``timeout_s``. Returns (exit code, output)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    print(f"\n$ {' '.join(command)}   (log: {log})", flush=True)
    proc = subprocess.Popen(
        command,
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        start_new_session=True,
    )
    timed_out = threading.Event()

    def kill() -> None:
        timed_out.set()
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    timer = threading.Timer(timeout_s, kill)
    timer.start()
    lines = []
    try:
        with open(log, "w") as out:
            assert proc.stdout is not None
            for line in proc.stdout:
                sys.stdout.write(line)
                out.write(line)
                lines.append(line)
        code = proc.wait()
    finally:
        timer.cancel()
    if timed_out.is_set():
        lines.append(f"TimeoutError: stopped after {timeout_s:.0f} s\n")
        code = code or 1
    return code, "".join(lines)


def child_env(out_dir: Path, own_storage: bool = True) -> dict[str, str]:
    """The environment for every step: this venv's bin first (jupyter, ray, py-spy); for lessons and
    benches (``own_storage``) the runs go to ``out_dir/storage`` unless ``COURSE_STORAGE`` says
    otherwise, so the pinned course's ``storage/`` is left alone."""
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.setdefault("COURSE_PROFILE", "auto")
    if own_storage:
        env.setdefault("COURSE_STORAGE", str(out_dir / "storage"))
    return env


def install(out_dir: Path, report: Report, relax_all: bool = False) -> bool:
    """Both requirement files relaxed, newest of everything (eager upgrade), the course package and the
    maintainers' tools (editable, as ``./build.sh setup`` installs them), the kernel."""
    requirements = "".join((REPO_ROOT / name).read_text() for name in REQUIREMENT_FILES)
    relaxed = out_dir / "requirements-canary.txt"
    relaxed.parent.mkdir(parents=True, exist_ok=True)
    held = {} if relax_all else HELD
    relaxed.write_text(relax_requirements(requirements, KEEP_PINNED | frozenset(held)))
    pip = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--progress-bar",
        "off",
        "--upgrade",
        "--upgrade-strategy",
        "eager",
    ]
    commands = [
        [*pip, "-r", str(relaxed)],
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "-e", str(REPO_ROOT)],
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "-e", str(REPO_ROOT / "maintainer_tools")],
        [sys.executable, "-m", "ipykernel", "install", "--sys-prefix", "--name", "ray-train-course",
         "--display-name", "Python (Ray Train course)"],
    ]  # fmt: skip
    for i, command in enumerate(commands):
        code, output = run(command, out_dir / "logs" / f"install-{i}.log", 3600, child_env(out_dir, False))
        if code != 0:
            report.steps.append(Step(INSTALL_STEP, False, first_error(output)))
            return False
    pins = pinned_versions(requirements)
    installed = installed_versions(pins)
    report.upgrades = [
        f"{name} {pins[name]} -> {now}" for name, now in installed.items() if now != pins[name]
    ]
    report.steps.append(
        Step(
            INSTALL_STEP,
            True,
            f"{len(report.upgrades)} direct dependencies newer than pinned",
            f"ray {pins.get('ray', '?')}",
            f"ray {installed.get('ray', '?')}",
        )
    )
    for name, why in held.items():
        version = pins.get(name, "?")
        report.steps.append(Step(f"held at its pin: {name}", True, why, version, installed.get(name, "?")))
    return True


def installed_versions(names: Sequence[str]) -> dict[str, str]:
    """Versions installed in this venv, asked in a fresh process (this one imported nothing new)."""
    code = (
        "import json, sys\nfrom importlib import metadata\nfound = {}\nfor n in sys.argv[1:]:\n"
        "    try:\n        found[n] = metadata.version(n)\n    except metadata.PackageNotFoundError:\n"
        "        found[n] = 'missing'\nprint(json.dumps(found))"
    )
    done = subprocess.run([sys.executable, "-c", code, *names], capture_output=True, text=True, check=False)
    try:
        return {normalise(k): val for k, val in json.loads(done.stdout).items()}
    except json.JSONDecodeError:
        return {}


def unit_tests(out_dir: Path, report: Report) -> None:
    command = [
        sys.executable,
        "-m",
        "pytest",
        "tests/unit",
        "-m",
        "not integration",
        "-q",
        "-p",
        "no:cacheprovider",
    ]
    code, output = run(command, out_dir / "logs" / "unit-tests.log", 3600, child_env(out_dir, False))
    report.steps.append(parse_pytest(output, code))


def lessons(out_dir: Path, selected: Sequence[str], report: Report) -> None:
    command = [
        sys.executable,
        "-m",
        "maintainer_tools.run_course",
        "--out",
        str(out_dir / "course"),
        *selected,
    ]
    code, output = run(command, out_dir / "logs" / "course.log", 4 * 3600, child_env(out_dir))
    found = parse_course_table(output)
    for lesson in found:
        seconds = "" if lesson.seconds is None else f"{lesson.seconds:.0f} s"
        report.steps.append(Step(f"lesson {lesson.name}", lesson.ok, lesson.error, canary=seconds))
    if not found:  # run_course itself did not get to its table
        report.steps.append(Step("lessons (run_course)", False, f"exit {code}: {first_error(output)}"))


def colab_lessons(out_dir: Path, report: Report) -> None:
    """Every lesson alone in a fresh Colab-shaped venv, installed by its own install cell
    (tests/colab_tier; CI runs one of them): what a Colab learner gets from PyPI this week."""
    command = [sys.executable, "-m", "pytest", "tests/colab_tier", "-q", "-p", "no:cacheprovider"]
    env = dict(child_env(out_dir, False), COURSE_COLAB_LESSONS="all")
    code, output = run(command, out_dir / "logs" / "colab-tier.log", 3 * 3600, env)
    report.steps.append(parse_pytest(output, code, "Colab-shaped: every lesson alone (tests/colab_tier)"))


def benches(out_dir: Path, names: Sequence[str], report: Report) -> None:
    pinned = json.loads(PINNED.read_text())["benches"]
    for name in names:
        command = [sys.executable, "-m", "maintainer_tools.bench", name]
        code, output = run(command, out_dir / "logs" / f"bench-{name}.log", 3600, child_env(out_dir))
        error = None if code == 0 else f"exit {code}: {first_error(output)}"
        report.steps.extend(bench_steps(name, pinned.get(name, {}), parse_bench(output), error))


def main(argv: Sequence[str] | None = None) -> int:
    """Install, test, run the lessons and the benches; print the table; 1 when anything failed."""
    parser = argparse.ArgumentParser(prog="./build.sh canary", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--lessons", nargs="*", default=[], metavar="NN", help="only these lessons, e.g. 01 02"
    )
    parser.add_argument("--no-bench", action="store_true", help="skip the benches (they take ≈ 20 min)")
    parser.add_argument(
        "--no-colab", action="store_true", help="skip the Colab-shaped run of every lesson (≈ 15 min)"
    )
    parser.add_argument("--benches", nargs="*", default=list(BENCHES), choices=BENCHES, metavar="NAME")
    parser.add_argument("--no-install", action="store_true", help="use the venv as it is (a re-run)")
    parser.add_argument(
        "--relax-all",
        action="store_true",
        help=f"relax the held pins too ({', '.join(HELD)}): is the reason gone?",
    )
    parser.add_argument(
        "--out", type=Path, default=REPO_ROOT / "build" / "canary", help="logs and executed lessons"
    )
    args = parser.parse_args(argv)
    out_dir = args.out.resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    report = Report()
    if args.no_install or install(out_dir, report, args.relax_all):
        unit_tests(out_dir, report)
        lessons(out_dir, args.lessons, report)
        if not args.no_colab:
            colab_lessons(out_dir, report)
        if not args.no_bench:
            benches(out_dir, args.benches, report)
    table = format_table(report)
    upgrades = "newer than pinned: " + (", ".join(report.upgrades) or "none")
    text = f"## Canary: the course on the newest Ray\n\n{upgrades}\n\n{table}\n"
    (out_dir / "canary.md").write_text(text)
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        with open(summary, "a") as out:
            out.write(text)
    if os.environ.get("GITHUB_ACTIONS") == "true":  # one annotation per failure on the run's page
        for step in report.steps:
            if step.ok is False:
                print(f"::error title=canary: {step.name}::{step.detail}")
    print(f"\n{text}\n{(time.perf_counter() - started) / 60:.0f} min; table in {out_dir / 'canary.md'}")
    return 1 if report.failed else 0


if __name__ == "__main__":
    sys.exit(main())
