"""What every exercise check says, and the hints and solutions a learner asks for.

A check (in ``lesson01`` ... ``lesson06``) called on the cell's placeholder (``...``) prints "not
attempted yet" without failing, so the course runs headless as shipped; a wrong answer raises
``ExerciseError`` saying what is wrong; a right one prints why it is right. Checks return None, so
a cell shows no stray ``True``. ``hint("NN.k")`` and ``solution("NN.k")`` read the ``**Hint:**``
paragraph and the first ```python block under ``## Exercise NN.k`` in ``notebooks/solutions/NN_*.md``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from course_utils.core.config import REPO_ROOT


def solutions_dir() -> Path:
    """``notebooks/solutions`` of the checkout; outside one (Colab, a lesson alone), the copy installed
    with the package as ``course_utils._solutions`` (pyproject.toml's package-dir)."""
    checkout = REPO_ROOT / "notebooks" / "solutions"
    return checkout if checkout.is_dir() else Path(__file__).resolve().parents[1] / "_solutions"


_HEADING = re.compile(r"^## Exercise (?P<id>\d\d\.\d+)\b", re.M)
_HINT = re.compile(r"^\*\*Hint:\*\*(?P<hint>.*?)(?:\n\s*\n|\Z)", re.M | re.S)
_CODE = re.compile(r"```python\n(?P<code>.*?)```", re.S)


class SolutionsError(ValueError):
    """The solutions file and the lesson's exercise cells do not match one to one."""


def _sections(lesson: str) -> tuple[str, dict[str, str]]:
    """(file name, ``{"NN.k": text under its heading}``) of ``notebooks/solutions/NN_*.md``, in order."""
    found = sorted(solutions_dir().glob(f"{lesson}_*.md"))
    if len(found) != 1:
        raise SolutionsError(f"Expected one notebooks/solutions/{lesson}_*.md, found {len(found)}.")
    text = found[0].read_text()
    headings = list(_HEADING.finditer(text))
    ends = [h.start() for h in headings[1:]] + [len(text)]
    return found[0].name, {h["id"]: text[h.end() : end] for h, end in zip(headings, ends, strict=True)}


def solutions(lesson: str) -> dict[str, str]:
    """``{"NN.k": code}`` from ``notebooks/solutions/NN_*.md``, in the file's order."""
    name, sections = _sections(lesson)
    result = {}
    for exercise, section in sections.items():
        code = _CODE.search(section)
        if code is None:
            raise SolutionsError(f"{name}: Exercise {exercise} has no ```python block.")
        result[exercise] = code["code"]
    return result


def _section(exercise: str) -> str:
    """The text under ``## Exercise NN.k`` in the lesson's solutions file, up to the next heading."""
    name, sections = _sections(exercise[:2])
    if exercise not in sections:
        raise SolutionsError(f"{name} has no '## Exercise {exercise}' section.")
    return sections[exercise]


def hint_text(exercise: str) -> str:
    """The ``**Hint:**`` paragraph of an exercise's solution section (a nudge, not the answer)."""
    match = _HINT.search(_section(exercise))
    if match is None:
        raise SolutionsError(f"Exercise {exercise} has no **Hint:** paragraph in its solutions file.")
    return " ".join(match["hint"].split())


def solution_text(exercise: str) -> str:
    """An exercise's published solution: its text without the hint (code block included)."""
    section = _HINT.sub("", _section(exercise), count=1)
    return section.split("\n", 1)[1].strip() if "\n" in section else section.strip()


class ExerciseError(AssertionError):
    """A learner's answer is wrong; the message says what is wrong and how to get it right."""


def _solutions_file(exercise: str) -> str:
    lesson = exercise.split(".")[0]
    found = sorted(solutions_dir().glob(f"{lesson}_*.md"))
    return f"notebooks/solutions/{found[0].name}" if found else f"notebooks/solutions/{lesson}_*.md"


def not_attempted(exercise: str, answer: Any) -> bool:
    """True (after saying so) when the learner has not replaced the placeholder yet."""
    if answer is not ...:
        return False
    print(
        f"Exercise {exercise}: not attempted yet. Replace the `...` in this cell with your answer "
        f'and run it again. Stuck? checks.hint("{exercise}") gives a hint, '
        f'checks.solution("{exercise}") the answer (also in {_solutions_file(exercise)}).'
    )
    return True


def hint(exercise: str) -> None:
    """Print a hint for exercise ``"NN.k"``: a nudge toward the answer, not the answer."""
    print(f"Hint for exercise {exercise}: {hint_text(exercise)}")


def solution(exercise: str) -> None:
    """Show the published solution of exercise ``"NN.k"`` (try the hint first)."""
    text = f"**Solution to exercise {exercise}**\n\n{solution_text(exercise)}"
    try:
        from IPython.display import Markdown, display

        display(Markdown(text))
    except ImportError:
        print(text)


def wrong(exercise: str, message: str) -> ExerciseError:
    """The error a check raises for a wrong answer: the exercise, then what is wrong."""
    return ExerciseError(f"Exercise {exercise}: {message}")


def ran_but(exercise: str, problems: list[str]) -> ExerciseError:
    """The error for a learner's function that ran for real but did something wrong: one line each."""
    return wrong(exercise, "your function ran, but\n" + "\n".join(f"- {p}" for p in problems))


def correct(exercise: str, message: str) -> None:
    """Say that the answer is right, and why."""
    print(f"Exercise {exercise}: correct. {message}")


def one_line(error: BaseException) -> str:
    """``Type: message`` of the error a learner's code raised, unwrapped from Ray's task errors."""
    seen = set()
    while id(error) not in seen:
        seen.add(id(error))
        inner = getattr(error, "cause", None) or error.__cause__
        if not isinstance(inner, BaseException):
            break
        error = inner
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[-1][:300] if text else ''}".rstrip(": ")
