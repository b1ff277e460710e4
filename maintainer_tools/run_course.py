"""``./build.sh course``: execute every lesson in order, headless, into the build folder.

Writes executed copies (``build/notebooks``), HTML (``build/html``) and an index page linking
the lessons with their run times. Every selected lesson is attempted even when an earlier one
failed (each lesson stands on its own: it prepares its data and trains what it needs); the run
ends with one table, lesson by lesson (``format_table``, which ``maintainer_tools.canary`` parses),
and exits 1 when any lesson failed. Committed notebooks stay without outputs.
"""

from __future__ import annotations

import argparse
import html
import json
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nbconvert import HTMLExporter
from nbmake.nb_result import NotebookError

from course_utils.core.config import REPO_ROOT, build_root, profile_name
from maintainer_tools.answered import ANSWERED_HEADING
from maintainer_tools.harness.tiers import course, run_lesson


def lessons(selected: list[str] | None = None, root: Path = REPO_ROOT) -> list[Path]:
    """The course notebooks in order (``root``'s: the repository's), optionally only those whose name
    starts with a selector."""
    found = sorted((root / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    if selected:
        found = [p for p in found if any(p.name.startswith(s) for s in selected)]
        if not found:
            raise SystemExit(f"No notebook matches {selected}; choose from the numbers 01, 02, ...")
    return found


# How long a lesson takes to read (README's learning path; CONTRIBUTING.md, "The learning path's minutes"):
# its prose at 200 words a minute, its code at 75 names and numbers a minute (``\w+``: a line of lesson
# code holds about 7, so about 10 lines; counted in names so that wrapping a line changes nothing), and
# what its cells print at 20 lines a minute. Code a cell prints (``show_source``, ``show_changes``) is code.
PROSE_WORDS_PER_MIN = 200
CODE_WORDS_PER_MIN = 75
PRINTED_LINES_PER_MIN = 20
# The longest main path a half-day workshop has room for (exercises and Going further come after it),
# and all six main paths together: a half-day workshop's reading, with its exercises and breaks beside it.
MAIN_PATH_LIMIT_MIN = 35
MAIN_PATHS_LIMIT_MIN = 150
# The whole course, Going further included, when the main paths were shortened: depth is moved off a
# main path, not added to the course.
WHOLE_COURSE_LIMIT_MIN = 301


def prose_words(markdown: str) -> int:
    """Words a learner reads in a markdown cell: fenced code is not prose, everything else is."""
    return len(re.findall(r"\S+", re.sub(r"```.*?```", " ", markdown, flags=re.DOTALL)))


# A lesson's main path ends at its first heading that opens the exercises or the optional depth.
PART_HEADING = re.compile(r"^#+ .*(?:Going further|Exercise)", re.IGNORECASE | re.MULTILINE)
FENCED = re.compile(r"```[^\n]*\n(.*?)```", re.DOTALL)
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


@dataclass
class Reading:
    """What a learner reads in part of an executed lesson: prose words, code names, printed lines."""

    words: int = 0
    names: int = 0
    lines: int = 0

    def add_markdown(self, text: str) -> None:
        """Prose words, and the names of any fenced code in it (``show_source``, a sketch)."""
        self.words += prose_words(text)
        self.names += sum(len(re.findall(r"\w+", block)) for block in FENCED.findall(text))

    @property
    def minutes(self) -> float:
        return (
            self.words / PROSE_WORDS_PER_MIN
            + self.names / CODE_WORDS_PER_MIN
            + self.lines / PRINTED_LINES_PER_MIN
        )


def _printed(output: dict[str, Any], into: Reading) -> None:
    """Add one cell output to ``into``: markdown as read (code shown as code), else its printed lines."""
    data = output.get("data", {})
    if "text/markdown" in data:
        into.add_markdown("".join(data["text/markdown"]))
        return
    if output.get("output_type") == "stream":
        text = "".join(output.get("text", ""))
    elif output.get("output_type") == "error":
        text = "\n".join(output.get("traceback", []))
    elif "image/png" in data or "application/vnd.jupyter.widget-view+json" in data:
        return  # a plot or a bar is looked at, not read line by line
    else:
        text = "".join(data.get("text/plain", ""))
    into.lines += sum(1 for line in ANSI.sub("", text).replace("\r", "\n").splitlines() if line.strip())


def reading_parts(executed: Path) -> tuple[Reading, Reading]:
    """(main path, the rest) of an executed lesson, as a learner reads them: prose at 200 words, code at
    75 names (its source, and what ``show_source``/``show_changes`` print), printed lines at 20 a minute.
    The main path is everything before the first "Exercise" or "Going further" heading. The answered
    exercises a test run appends (``answered.ANSWERED_HEADING``) are not the lesson: the count stops there,
    so a test run's copy and ``./build.sh course``'s read the same."""
    main, rest = Reading(), Reading()
    part = main
    for cell in json.loads(Path(executed).read_text())["cells"]:
        text = "".join(cell["source"])
        if cell["cell_type"] == "markdown" and text.startswith(ANSWERED_HEADING):
            break
        if cell["cell_type"] == "markdown":
            if PART_HEADING.search(text):
                part = rest
            part.add_markdown(text)
        elif cell["cell_type"] == "code":
            part.names += len(re.findall(r"\w+", text))
            for output in cell.get("outputs", []):
                _printed(output, part)
    return main, rest


class LessonFailed(RuntimeError):
    """A lesson stopped at an error: how long it ran and the error's first line."""

    def __init__(self, message: str, *, seconds: float, first_line: str) -> None:
        super().__init__(message)
        self.seconds = seconds
        self.first_line = first_line


@dataclass
class LessonRun:
    """One lesson's outcome: ``error`` is the first error line, ``None`` when it passed."""

    name: str
    seconds: float | None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


def one_line(text: str, limit: int = 200) -> str:
    """The first non-empty line of ``text``, shortened to ``limit`` characters, without ``|``
    (it goes into a Markdown table)."""
    line = next((ln.strip() for ln in str(text).splitlines() if ln.strip()), "")
    line = line.replace("|", "/")
    return line if len(line) <= limit else line[: limit - 1] + "…"


def first_error_line(nb: Any, error: NotebookError) -> str:
    """Where and why a lesson stopped, in one line: the failing cell's ``# NN. Title`` line (when it
    has one) and ``ErrorName: message``; when that cell shows no error (a timeout, a dead kernel), the
    run's summary. The runner names the failing cell (``tiers.run_lesson``: never one tagged
    ``raises-exception``, which fails on purpose)."""
    cells = nb.get("cells", [])
    cell = cells[error.failing_cell_index] if 0 <= error.failing_cell_index < len(cells) else {}
    errors = [out for out in cell.get("outputs", []) if out.get("output_type") == "error"]
    if not errors:
        return one_line(ANSI.sub("", error.summary))
    first = one_line(cell.get("source", ""))
    where = f"{first[2:]}: " if first.startswith("# ") else ""
    return one_line(f"{where}{errors[0].get('ename')}: {one_line(errors[0].get('evalue', ''))}")


def execute(path: Path, out_dir: Path, timeout_s: int) -> float:
    """Run one notebook in a fresh kernel (``tiers.run_lesson``, the course tier); save the executed
    copy (``out_dir/notebooks``) and its HTML; return seconds.

    The kernel process's own stderr (Ray's native logs, jupyter's warnings, a stack dump when the
    kernel is stopped) goes to ``out_dir/logs/course-<lesson>.kernel.log``, not the terminal: what the
    notebook prints is in its executed copy.
    """
    run = run_lesson(path, course(out_dir), timeout_s=timeout_s)
    (out_dir / "html").mkdir(parents=True, exist_ok=True)
    body, _ = HTMLExporter().from_notebook_node(run.nb)
    (out_dir / "html" / f"{path.stem}.html").write_text(body)
    if run.error is not None:
        raise LessonFailed(
            f"{path.name} failed after {run.seconds:.0f} s; see {out_dir / 'html' / (path.stem + '.html')}",
            seconds=run.seconds,
            first_line=first_error_line(run.nb, run.error),
        )
    return run.seconds


def write_index(out_dir: Path, runs: list[LessonRun]) -> Path:
    """An HTML page linking the executed lessons in order, with each one's run time and outcome."""
    items = "\n".join(
        f'<tr><td><a href="html/{html.escape(r.name)}.html">{html.escape(r.name)}</a></td>'
        f"<td>{'' if r.seconds is None else f'{r.seconds / 60:.1f} min'}</td>"
        f"<td>{'ok' if r.ok else 'FAILED'}</td><td>{html.escape(r.error or '')}</td></tr>"
        for r in runs
    )
    failed = sum(not r.ok for r in runs)
    summary = f"{len(runs) - failed} of {len(runs)} lessons passed" + (f", {failed} FAILED" if failed else "")
    page = (
        "<!doctype html><meta charset='utf-8'><title>Ray Train course</title>"
        "<h1>Distributed PyTorch with Ray Train: executed lessons</h1>"
        f"<p>Profile: {html.escape(profile_name())}. Generated {time.strftime('%Y-%m-%d %H:%M')}. "
        f"{summary}.</p>"
        "<table border=1 cellpadding=4><tr><th>lesson</th><th>run time</th><th>status</th>"
        f"<th>first error line</th></tr>{items}</table>"
    )
    index = out_dir / "index.html"
    index.write_text(page)
    return index


TABLE_HEADER = "| lesson | seconds | result | first error line | last run |"
TIMES_FILE = "course-times.json"  # in the output folder: each lesson's seconds when it last passed


def previous_times(out_dir: Path) -> dict[str, float]:
    """Each lesson's seconds from the last run that passed it here (``{}`` on a first run)."""
    try:
        return {k: float(v) for k, v in json.loads((out_dir / TIMES_FILE).read_text()).items()}
    except (OSError, ValueError, AttributeError):
        return {}


def record_times(out_dir: Path, runs: list[LessonRun], before: dict[str, float]) -> None:
    """Keep this run's seconds for every lesson that passed (the others keep their last ones)."""
    times = dict(before, **{r.name: round(r.seconds, 1) for r in runs if r.ok and r.seconds is not None})
    (out_dir / TIMES_FILE).write_text(json.dumps(times, indent=1, sort_keys=True) + "\n")


def format_table(runs: list[LessonRun], before: dict[str, float] | None = None) -> str:
    """The run's last lines: a Markdown table, one row per lesson (``ok`` or ``FAILED``, the first
    error line, and the seconds of the last run that passed it here, to compare before and after a
    change). ``maintainer_tools.canary.parse_course_table`` reads it back."""
    rows = [TABLE_HEADER, "|---|---:|---|---|---:|"]
    for r in runs:
        seconds = "" if r.seconds is None else f"{r.seconds:.0f}"
        last = "" if not before or r.name not in before else f"{before[r.name]:.0f}"
        rows.append(f"| {r.name} | {seconds} | {'ok' if r.ok else 'FAILED'} | {r.error or ''} | {last} |")
    return "\n".join(rows)


def run_lessons(paths: list[Path], out_dir: Path, timeout_s: int) -> list[LessonRun]:
    """Execute every lesson in ``paths``, each whatever happened to the one before."""
    runs: list[LessonRun] = []
    for path in paths:
        print(f"{path.stem} ...", end=" ", flush=True)
        try:
            seconds = execute(path, out_dir, timeout_s)
        except LessonFailed as exc:
            runs.append(LessonRun(path.stem, exc.seconds, exc.first_line or "failed"))
            print(f"FAILED\n  {exc}\n  {exc.first_line}", flush=True)
        except Exception as exc:  # the kernel did not start, the HTML export broke: still a lesson's outcome
            runs.append(LessonRun(path.stem, None, one_line(f"{type(exc).__name__}: {exc}")))
            print(f"FAILED\n  {type(exc).__name__}: {exc}", flush=True)
        else:
            runs.append(LessonRun(path.stem, seconds))
            print(f"{seconds:.0f} s", flush=True)
    return runs


def main(argv: list[str] | None = None) -> int:
    """Run the selected lessons (all by default); 0 when every one passed, else 1."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("only", nargs="*", help="lesson numbers to run (default: all), e.g. 01 02")
    parser.add_argument("--timeout", type=int, default=900, help="seconds per cell (default 900)")
    parser.add_argument(
        "--out", type=Path, default=None, help="folder for the executed copies (default: build/)"
    )
    args = parser.parse_args(argv)
    out_dir = (args.out or build_root()).resolve()
    print(f"Running the course in the {profile_name()} profile; executed copies go to {out_dir}")
    before = previous_times(out_dir)
    runs = run_lessons(lessons(args.only), out_dir, args.timeout)
    index = write_index(out_dir, runs)
    record_times(out_dir, runs, before)
    total = sum(r.seconds or 0 for r in runs)
    failed = [r.name for r in runs if not r.ok]
    print(f"\n{format_table(runs, before)}\n")
    print(f"total: {total / 60:.1f} min; index: {index}")
    if failed:
        print(f"{len(failed)} of {len(runs)} lessons FAILED: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
