"""How long each lesson takes to read, counted on the lessons this run executed: every main path fits a
half-day workshop, and README's learning path gives the count.

The count (``maintainer_tools.run_course.reading_parts``; CONTRIBUTING.md, "The learning path's minutes")
needs what the cells printed, so it reads the executed copies (``build/tests/lessons`` from this run's
notebook tests, or ``./build.sh course``'s, the newer of the two): this module runs after the lessons
(``conftest.py``).
"""

from __future__ import annotations

import re

import pytest

from maintainer_tools import docsite
from maintainer_tools.run_course import (
    MAIN_PATH_LIMIT_MIN,
    MAIN_PATHS_LIMIT_MIN,
    WHOLE_COURSE_LIMIT_MIN,
    reading_parts,
)
from tests.checkout import REPO_ROOT

pytestmark = pytest.mark.executed

README = REPO_ROOT / "README.md"
# Printed lines differ a little from run to run (a traceback's length, Ray's warnings): README's figure
# stands while the count stays this close to it.
README_TOLERANCE_MIN = 2


def test_every_main_path_fits_a_workshop_and_readme_gives_the_count(summary_note):
    counted = {}
    for name, executed in docsite.executed_lessons().items():
        lesson = REPO_ROOT / "notebooks" / name
        assert executed.stat().st_mtime >= lesson.stat().st_mtime, (
            f"{executed} is older than {lesson}: run the lesson again (pytest {lesson.relative_to(REPO_ROOT)})"
        )
        main, rest = reading_parts(executed)
        counted[name] = (main.minutes, rest.minutes)
    table = "; ".join(f"{name[:2]} {main:.1f} + {rest:.1f}" for name, (main, rest) in counted.items())
    mains, total = sum(m for m, _ in counted.values()), sum(m + r for m, r in counted.values())
    summary_note(
        f"reading minutes (main path + exercises and Going further): {table};"
        f" main paths {mains:.0f}, whole course {total:.0f}"
    )
    long = {name: round(main, 1) for name, (main, _) in counted.items() if main > MAIN_PATH_LIMIT_MIN}
    assert not long, (
        f"main paths over {MAIN_PATH_LIMIT_MIN} min: {long}; move depth into the lesson's Going further ({table})"
    )
    assert mains <= MAIN_PATHS_LIMIT_MIN, (
        f"the main paths read {mains:.0f} min together, more than a half-day workshop's"
        f" {MAIN_PATHS_LIMIT_MIN}: move depth into Going further ({table})"
    )
    assert total <= WHOLE_COURSE_LIMIT_MIN, (
        f"the whole course reads {total:.0f} min, more than {WHOLE_COURSE_LIMIT_MIN}: depth moved, not added? ({table})"
    )
    rows = {
        re.search(r"\(notebooks/([^)]+)\)", row)[1]: [cell.strip() for cell in row.strip("|").split("|")]
        for row in README.read_text().splitlines()
        if row.startswith("| [")
    }
    for name, (main, rest) in counted.items():
        said = (int(rows[name][3]), int(rows[name][4]))
        assert abs(said[0] - main) <= README_TOLERANCE_MIN and abs(said[1] - rest) <= README_TOLERANCE_MIN, (
            f"README gives {name} {said[0]} + {said[1]} reading minutes; counted {main:.0f} + {rest:.0f} ({table})"
        )
