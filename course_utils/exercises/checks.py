"""What every exercise check says, and the hints and solutions a learner asks for.

Each exercise cell starts with a placeholder (``...``) where the learner's answer goes. A check
called on the placeholder prints "not attempted yet" and where the solution is, without failing
(so the course runs headless and in CI as shipped); on a wrong answer it raises
``ExerciseError`` saying in plain words what is wrong; on a right one it prints why it is right
("Exercise NN.k: correct. ..."). Checks return None, so a notebook cell shows their words and no
stray ``True``/``False``. ``hint("NN.k")`` and ``solution("NN.k")`` read
``notebooks/solutions/NN_*.md``. The checks themselves are in ``lesson01`` ... ``lesson06``.
"""

from __future__ import annotations

from typing import Any

from course_utils import solutions
from course_utils.solutions import solutions_dir


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
    print(f"Hint for exercise {exercise}: {solutions.hint(exercise)}")


def solution(exercise: str) -> None:
    """Show the published solution of exercise ``"NN.k"`` (try the hint first)."""
    text = f"**Solution to exercise {exercise}**\n\n{solutions.solution(exercise)}"
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
