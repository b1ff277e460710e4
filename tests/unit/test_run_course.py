"""./build.sh course attempts every lesson even when one fails, ends with one table, and exits 1 on
any failure. ``execute`` is replaced by a fake: no kernel, no Ray."""

import json
from pathlib import Path

import nbformat
import pytest
from nbmake.nb_result import NotebookError

from maintainer_tools import run_course
from maintainer_tools.answered import ANSWERED_HEADING


def _fake_execute(fail: dict[str, Exception]):
    calls: list[str] = []

    def execute(path: Path, out_dir: Path, timeout_s: int) -> float:
        calls.append(path.stem[:2])
        if path.stem[:2] in fail:
            raise fail[path.stem[:2]]
        return 12.0

    return execute, calls


def test_every_lesson_runs_after_a_failure_and_the_run_exits_1(monkeypatch, tmp_path, capsys):
    failure = run_course.LessonFailed("02 failed", seconds=40.0, first_line="06. Fit: ValueError: boom")
    execute, calls = _fake_execute({"02": failure, "04": OSError("kernel died")})
    monkeypatch.setattr(run_course, "execute", execute)
    code = run_course.main(["01", "02", "03", "04", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 1 and calls == ["01", "02", "03", "04"]
    assert "2 of 4 lessons FAILED" in out
    table = out[out.index(run_course.TABLE_HEADER) :].splitlines()
    assert table[2:6] == [
        f"| {run_course.lessons(['01'])[0].stem} | 12 | ok |  |  |",
        f"| {run_course.lessons(['02'])[0].stem} | 40 | FAILED | 06. Fit: ValueError: boom |  |",
        f"| {run_course.lessons(['03'])[0].stem} | 12 | ok |  |  |",
        f"| {run_course.lessons(['04'])[0].stem} |  | FAILED | OSError: kernel died |  |",
    ]
    page = (tmp_path / "index.html").read_text()
    assert "06. Fit: ValueError: boom" in page and "2 of 4 lessons passed, 2 FAILED" in page


def test_a_clean_run_exits_0(monkeypatch, tmp_path, capsys):
    execute, calls = _fake_execute({})
    monkeypatch.setattr(run_course, "execute", execute)
    assert run_course.main(["01", "02", "--out", str(tmp_path)]) == 0 and calls == ["01", "02"]
    assert "FAILED" not in capsys.readouterr().out


def test_the_table_shows_each_lessons_last_passing_run_beside_this_one(monkeypatch, tmp_path, capsys):
    from maintainer_tools import canary

    first = run_course.lessons(["01"])[0].stem
    (tmp_path / run_course.TIMES_FILE).write_text(json.dumps({first: 30.4}))
    execute, _ = _fake_execute({})
    monkeypatch.setattr(run_course, "execute", execute)
    run_course.main(["01", "02", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert f"| {first} | 12 | ok |  | 30 |" in out  # this run 12 s, the last one 30 s
    assert [lesson.seconds for lesson in canary.parse_course_table(out)] == [12.0, 12.0]  # still parsed
    assert run_course.previous_times(tmp_path)[first] == 12.0  # the next run compares with this one


def test_first_error_line_names_the_failing_section_the_runner_found():
    nb = nbformat.v4.new_notebook()
    on_purpose = nbformat.v4.new_code_cell(
        "# 03. Retries run out\nfit()", metadata={"tags": ["raises-exception"]}
    )
    on_purpose.outputs = [
        nbformat.v4.new_output("error", ename="TrainingFailedError", evalue="x", traceback=[])
    ]
    real = nbformat.v4.new_code_cell("# 05. Restore\nrestore()")
    real.outputs = [nbformat.v4.new_output("error", ename="KeyError", evalue="'epoch'", traceback=[])]
    nb.cells = [nbformat.v4.new_code_cell("x = 1"), on_purpose, real]

    # the runner (tiers.run_lesson) names cell 2, not the one failing on purpose (tests/unit/test_tiers.py)
    failed = NotebookError("KeyError: 'epoch'", "", 2)
    assert run_course.first_error_line(nb, failed) == "05. Restore: KeyError: 'epoch'"
    # a timeout or a dead kernel leaves no error in a cell: the run's summary, first line, colours off
    summary = "\x1b[31mCellTimeoutError: cell ran 900 s\x1b[0m\nmore"
    timed_out = NotebookError(summary, summary, 0)
    nb.cells = [nbformat.v4.new_code_cell("import time\ntime.sleep(1000)")]
    assert run_course.first_error_line(nb, timed_out) == "CellTimeoutError: cell ran 900 s"


@pytest.mark.parametrize(
    "text, expected", [("a | b\nc", "a / b"), ("\n\n  x  ", "x"), ("y" * 300, "y" * 199 + "…")]
)
def test_one_line(text, expected):
    assert run_course.one_line(text) == expected


def _executed(tmp_path: Path, cells: list[dict]) -> Path:
    path = tmp_path / f"{len(list(tmp_path.iterdir()))}.ipynb"
    path.write_text(json.dumps({"cells": cells}))
    return path


def _md(text: str) -> dict:
    return {"cell_type": "markdown", "source": text}


def _code(text: str, *outputs: dict) -> dict:
    return {"cell_type": "code", "source": text, "outputs": list(outputs)}


def test_reading_counts_code_by_names_so_wrapping_changes_nothing(tmp_path):
    one_line = "metrics = epoch_metrics(model, test_loader, device, epoch, train_loss, images, seconds)\n"
    wrapped = "metrics = epoch_metrics(\n    model,\n    test_loader,\n    device,\n    epoch,\n"
    wrapped += "    train_loss,\n    images,\n    seconds,\n)\n"
    # 1,000 prose words (5 min) and 75 x 9 names (9 min) either way
    for code in (one_line, wrapped):
        main, rest = run_course.reading_parts(_executed(tmp_path, [_md("word " * 1000)] + [_code(code)] * 75))
        assert (main.words, main.names, round(main.minutes, 6), rest.minutes) == (1000, 675, 14.0, 0)


def test_reading_splits_at_the_first_exercise_or_going_further_heading_and_reads_outputs(tmp_path):
    printed = {"output_type": "stream", "name": "stdout", "text": "epoch 0\n\x1b[31mred\x1b[0m\n\n"}
    shown = {  # show_changes: a diff, read as code
        "output_type": "display_data",
        "data": {"text/markdown": "```diff\n-a = 1\n+a = 2\n```", "text/plain": "<Markdown>"},
    }
    plot = {"output_type": "display_data", "data": {"image/png": "...", "text/plain": "<Figure>"}}
    table = {"output_type": "execute_result", "data": {"text/plain": "   a\n0  1\n1  2"}}
    error = {"output_type": "error", "traceback": ["Traceback", "  line", "ValueError: x"]}
    cells = [
        _md("# Lesson\n\nTwo words.\n\n```python\nx = f(y)\n```"),
        _code("x = 1", printed, shown, plot, table, error),
        _md("## 07 · Exercise 1: retry twice"),
        _code("my = ..."),
        _md("## 12 · Going further: more"),
        _md(ANSWERED_HEADING),  # a test run's answered exercises: not the lesson, not counted
        _code("my = 42", printed),
    ]
    main, rest = run_course.reading_parts(_executed(tmp_path, cells))
    # prose: "# Lesson Two words." (4); code: x f y, x 1, a 1 a 2; lines: 2 printed + 3 of the table + 3 of the error
    assert (main.words, main.names, main.lines) == (4, 9, 8)
    assert (rest.words, rest.names, rest.lines) == (13, 1, 0)  # both headings, token by token; "my"
