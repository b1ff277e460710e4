"""Lessons as pytest items, and a closing summary of the paths a learner takes.

``pytest notebooks`` (and ``./build.sh test``) collects each ``notebooks/NN_*.ipynb`` as one
item that runs the lesson as shipped and then, in the same kernel, its exercises answered with
the published solutions (``maintainer_tools.answered``); each answer's check must print
"correct". With ``--nbmake`` the lessons are left to nbmake and run as shipped only.

Every test that belongs to a learner's path carries ``@pytest.mark.path("...")``; the end of
the test output lists each path with what ran, its outcome and its time.
"""

from __future__ import annotations

import re
import time
from collections import defaultdict
from pathlib import Path

import pytest
from nbmake.pytest_items import NotebookFailedException, NotebookItem

from maintainer_tools.harness.notebook_runs import ANSWERED, LAPTOP

LESSON = re.compile(r"^\d\d_.*\.ipynb$")


def pytest_collect_file(file_path: Path, parent):
    if (
        not parent.config.option.nbmake
        and file_path.parent.name == "notebooks"
        and LESSON.match(file_path.name)
    ):
        return LessonFile.from_parent(parent, path=file_path)
    return None


class LessonFile(pytest.File):
    def collect(self):
        item = LessonItem.from_parent(self, filename=str(self.path))
        item.add_marker(pytest.mark.notebooks)
        item.add_marker(pytest.mark.path(LAPTOP))
        item.add_marker(pytest.mark.path(ANSWERED))
        yield item


class LessonItem(NotebookItem):
    """nbmake's item (its failure report shows the failing cell), run with the exercises answered."""

    def runtest(self) -> None:
        from maintainer_tools import answered
        from maintainer_tools.harness.notebook_runs import (
            alarming_output,
            progress_text_not_final,
            unexplained_red_lines,
        )
        from maintainer_tools.harness.tiers import LAPTOP_TIER, run_lesson

        result = run_lesson(Path(self.filename), LAPTOP_TIER, timeout_s=self.config.option.nbmake_timeout)
        if result.error is not None:
            result.error.trace += f"\n\nThe kernel's own stderr (Ray's native logs): {result.kernel_log}"
            raise NotebookFailedException(result)
        missing = answered.unanswered(result.nb)
        if missing:
            raise AssertionError(
                f"{Path(self.filename).name}: with the published solution pasted in, exercise(s) {missing} "
                "did not print 'correct' (see the executed copy under build/tests/lessons/)."
            )
        alarming = alarming_output(result.nb, Path(self.filename).name)
        if alarming:
            raise AssertionError(
                f"{Path(self.filename).name} ran fine, but its output shows what a learner reads as 'it broke' "
                "(see the executed copy under build/tests/lessons/; Ray's own logs belong in its log folder, "
                "course_utils.internals.logs):\n  " + "\n  ".join(alarming)
            )
        stale = progress_text_not_final(result.nb)
        if stale:
            raise AssertionError(
                f"{Path(self.filename).name}: a progress bar's saved text is not its final state, so GitHub and "
                "nbconvert show it unfinished (course_utils.bars):\n  " + "\n  ".join(stale)
            )
        unexplained = unexplained_red_lines(result.nb, Path(self.filename).name)
        if unexplained:
            raise AssertionError(
                f"{Path(self.filename).name}: red output of a cell that fails on purpose is not announced before "
                "it or not explained after it (tests/notebook_runs.RED_LINES; see the executed copy under "
                "build/tests/lessons/):\n  " + "\n  ".join(unexplained)
            )

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, AssertionError):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style)


# ------------------------------------------------------------------------ paths summary

_paths: dict[str, list[str]] = defaultdict(list)
_outcomes: dict[str, tuple[str, float]] = {}
_notes: list[str] = []
_started = time.monotonic()


@pytest.fixture
def summary_note():
    """``summary_note("...")`` adds a line to the end of the test output (e.g. each workshop learner's
    lesson times), where pytest's capture does not hide it."""
    return _notes.append


def pytest_collection_modifyitems(items) -> None:
    # The reading count and the site read the lessons this run executed (build/tests/lessons): they go
    # after everything else, the site last.
    items.sort(
        key=lambda item: (
            item.get_closest_marker("site") is not None,
            item.get_closest_marker("executed") is not None,
        )
    )
    for item in items:
        for marker in item.iter_markers("path"):
            _paths[marker.args[0]].append(item.nodeid)


def pytest_runtest_logreport(report) -> None:
    outcome, seconds = _outcomes.get(report.nodeid, ("passed", 0.0))
    seconds += report.duration
    if report.failed:
        outcome = "failed"
    elif report.skipped and outcome != "failed":
        outcome = "skipped"
    _outcomes[report.nodeid] = (outcome, seconds)


def pytest_terminal_summary(terminalreporter) -> None:
    if not _paths or not _outcomes:
        return
    terminalreporter.section("paths a learner takes")
    for path, nodeids in _paths.items():
        ran = [n for n in nodeids if n in _outcomes]
        counts: dict[str, int] = defaultdict(int)
        for n in ran:
            counts[_outcomes[n][0]] += 1
        seconds = sum(_outcomes[n][1] for n in ran)
        state = ", ".join(f"{v} {k}" for k, v in sorted(counts.items())) or "not run"
        terminalreporter.write_line(f"{path}: {state}, {seconds:.0f} s")
        groups: dict[str, list[str]] = defaultdict(list)
        for n in ran:
            groups[_short(n)].append(n)
        parts = []
        for name, members in sorted(groups.items(), key=lambda g: -sum(_outcomes[n][1] for n in g[1])):
            took = sum(_outcomes[n][1] for n in members)
            bad = [_outcomes[n][0] for n in members if _outcomes[n][0] != "passed"]
            times = f" x{len(members)}" if len(members) > 1 else ""
            parts.append(f"{name}{times} {took:.0f} s" + (f" ({', '.join(sorted(set(bad)))})" if bad else ""))
        if parts:
            more = f"; and {len(parts) - 6} more" if len(parts) > 6 else ""
            terminalreporter.write_line("    " + "; ".join(parts[:6]) + more)
    for note in _notes:
        terminalreporter.write_line(note)
    terminalreporter.write_line(f"whole run: {time.monotonic() - _started:.0f} s")


def _short(nodeid: str) -> str:
    """'04_fault_tolerance' for a lesson item; the test function (parameters folded) otherwise,
    with the lesson for a parametrised lesson test: 'test_lesson_on_..[04_fault_tolerance]'."""
    name = nodeid.split("::")[-1]
    if name.endswith(".ipynb"):
        return Path(name).stem
    test, _, param = name.partition("[")
    param = param.rstrip("]")
    return f"{test}[{param}]" if param[:2].isdigit() and "_" in param else test
