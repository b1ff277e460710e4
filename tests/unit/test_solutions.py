"""Published solutions pasted into exercise cells, as the lesson items run them."""

import pytest

from course_utils.exercises import checks
from maintainer_tools import answered
from maintainer_tools.harness.notebook_runs import ANSWERED, LESSONS

pytestmark = pytest.mark.path(ANSWERED)


@pytest.mark.parametrize("lesson", LESSONS, ids=[p.stem[:2] for p in LESSONS])
def test_every_placeholder_has_its_solution_and_no_placeholder_is_left(lesson):
    nb = answered.answered_notebook(lesson)
    pasted = [c for c in nb.cells if answered.ANSWERED_TAG in c.metadata.get("tags", [])]
    assert pasted, f"{lesson.name} has no exercise"
    for cell in pasted:
        assert not answered.PLACEHOLDER.search(cell.source), cell.source
        for exercise in cell.metadata["exercises"]:
            assert checks.solutions(exercise[:2])[exercise].strip() in cell.source


def test_answer_replaces_each_placeholder_in_order_keeping_the_rest():
    source = "import x\n  a = ...  # YOUR ANSWER: a\nb = ...  # YOUR ANSWER: b\ncheck(a, b)"
    out = answered.answer(source, ["a = 1\n\nq = 2\n", "def b():\n    return 3\n"])
    assert out == "import x\n  a = 1\n\n  q = 2\ndef b():\n    return 3\ncheck(a, b)"
    with pytest.raises(checks.SolutionsError):
        answered.answer(source, ["a = 1"])


def test_a_mismatch_between_lesson_and_solutions_is_an_error(tmp_path, monkeypatch):
    (tmp_path / "01_x.md").write_text("## Exercise 01.1 · One\n\n```python\nx = 1\n```\n")
    monkeypatch.setattr(checks, "solutions_dir", lambda: tmp_path)
    with pytest.raises(checks.SolutionsError, match=r"01\.2"):
        answered.answered_notebook(LESSONS[0])  # lesson 01 has two exercises


def test_unanswered_lists_exercises_whose_check_did_not_say_correct():
    def cell(ids, text):
        return {
            "cell_type": "code",
            "metadata": {"tags": [answered.ANSWERED_TAG], "exercises": ids},
            "outputs": [{"output_type": "stream", "name": "stdout", "text": text}],
        }

    nb = {
        "cells": [
            cell(["04.1", "04.2"], "Exercise 04.1: correct. ...\n"),
            cell(["04.3"], "Exercise 04.3: correct."),
        ]
    }
    assert answered.unanswered(nb) == ["04.2"]


@pytest.mark.parametrize("lesson", LESSONS, ids=[p.stem[:2] for p in LESSONS])
def test_every_exercise_offers_a_hint_that_is_not_the_answer(lesson, capsys):
    from course_utils.exercises import checks

    for exercise, code in checks.solutions(answered.lesson_number(lesson)).items():
        hint = checks.hint_text(exercise)
        assert len(hint) > 20 and code.strip() not in hint, f"{exercise}: {hint!r}"
        assert "**Hint:**" not in checks.solution_text(exercise) and code.strip() in checks.solution_text(
            exercise
        )
        checks.hint(exercise)
        assert capsys.readouterr().out.startswith(f"Hint for exercise {exercise}: {hint}")


def test_a_missing_hint_is_an_error(tmp_path, monkeypatch):
    (tmp_path / "01_x.md").write_text("## Exercise 01.1 · One\n\n```python\nx = 1\n```\n")
    monkeypatch.setattr(checks, "solutions_dir", lambda: tmp_path)
    with pytest.raises(checks.SolutionsError, match="no \\*\\*Hint"):
        checks.hint_text("01.1")
    assert checks.solution_text("01.1") == "```python\nx = 1\n```"
