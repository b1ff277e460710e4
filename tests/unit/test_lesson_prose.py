"""Lesson prose never states a figure the notebook measures.

A number with a unit of time, share, speed-up or throughput (s, ms, min, %, ×, images/s, rows/s) in a
lesson's markdown is wrong on the next machine and the next Ray, unless it is a setting or a constant
(Ray's defaults, a value the lesson sets) or says where it was measured. So each such figure must sit
in a sentence that names its source: "default", "constant", "setting", "set", an environment variable
or a ``key=value`` in backticks, "README" or a page under ``docs/`` (where the course's measured figures
live), "measured on". The cell that measures prints its own reading.
Code (fenced blocks, inline backticks) is not prose.
"""

from __future__ import annotations

import json
import re

import pytest

from maintainer_tools.harness.notebook_runs import LESSONS
from maintainer_tools.run_course import prose_words

UNIT = r"(?:ms|s|min|minutes?|seconds?|%|×|x|images/s|img/s|rows/s)"
FIGURE = re.compile(rf"(?<![\w.,-])≈?\s?\d[\d,.]*(?:\s?[–-]\s?\d[\d,.]*)?\s?{UNIT}(?![\w/])")
SOURCED = re.compile(
    r"default|constant|setting|\bsets?\b|README|\bdocs/[\w-]+\.md|measured on|`[A-Z][A-Z0-9_]{5,}[^`]*`|`[\w.]+=",
    re.IGNORECASE,
)
SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z(*`])|\n\s*\n|\n\s*(?:[-*]|\d+\.)\s")


def unsourced_figures(markdown: str) -> list[tuple[str, str]]:
    """(figure, sentence) for each measured-looking figure whose sentence names no source."""
    text = re.sub(r"```.*?```", " ", markdown, flags=re.DOTALL)
    found = []
    for sentence in SENTENCE_END.split(text):
        prose = re.sub(r"`[^`]*`", " ", sentence)  # inline code is not prose
        for figure in FIGURE.finditer(prose):
            if not SOURCED.search(sentence):
                found.append((figure.group().strip(), " ".join(sentence.split())[:200]))
    return found


@pytest.mark.parametrize(
    ("markdown", "flagged"),
    [
        ("The resize came 0.3–0.7 s after the node registered.", ["0.3–0.7 s"]),
        ("Warns after 60 s by default.", []),  # a setting, named as one
        ("It was about 4× faster here.", ["4×"]),
        ("Polls every `RAY_TRAIN_HEALTH_CHECK_INTERVAL_S` (0.5 s).", []),
        ("Measured: 1,208 images/s against 787.", ["1,208 images/s"]),
        ("A 28×28 image, batch 128, `timeout_s=5`.", []),
        ("```python\nsleep(5)  # 5 s\n```", []),
    ],
)
def test_the_rule_itself(markdown, flagged):
    assert [figure for figure, _ in unsourced_figures(markdown)] == flagged


@pytest.mark.parametrize("lesson", LESSONS, ids=[p.stem for p in LESSONS])
def test_lesson_prose_states_no_measured_figure(lesson):
    cells = json.loads(lesson.read_text())["cells"]
    found = [
        f"cell {i}: {figure!r} in: {sentence}"
        for i, cell in enumerate(cells)
        if cell["cell_type"] == "markdown"
        for figure, sentence in unsourced_figures("".join(cell["source"]))
    ]
    assert not found, (
        f"{lesson.name}: figures typed into prose (print them from the cell that measures, or say where "
        "they were measured):\n  " + "\n  ".join(found)
    )


# ------------------------------------------------ one idea at a time

MAIN_PATH_WORDS = 1800  # a lesson's prose before its "Going further" part
CELL_WORDS = 250  # any one markdown cell
GOING_FURTHER = re.compile(r"^#+ .*going further", re.IGNORECASE)


def main_path_and_going_further(cells: list[dict]) -> tuple[list[str], list[str]]:
    """The lesson's markdown split at its first "Going further" heading (the optional part at the end)."""
    main, further = [], []
    for cell in cells:
        if cell["cell_type"] != "markdown":
            continue
        text = "".join(cell["source"])
        if further or GOING_FURTHER.match(text.lstrip()):
            further.append(text)
        else:
            main.append(text)
    return main, further


def test_prose_words_skip_code_and_split_at_going_further():
    cells = [
        {"cell_type": "markdown", "source": ["## 01 · A\n", "two words\n", "```python\nx = 1 + 2\n```"]},
        {"cell_type": "code", "source": ["print('not prose')"]},
        {"cell_type": "markdown", "source": ["## 09 · Going further: more\n", "depth"]},
        {"cell_type": "markdown", "source": ["**Next:** lesson"]},
    ]
    main, further = main_path_and_going_further(cells)
    assert [prose_words(m) for m in main] == [6]
    assert [prose_words(m) for m in further] == [7, 2]


@pytest.mark.parametrize("lesson", LESSONS, ids=[p.stem for p in LESSONS])
def test_lesson_main_path_is_short_and_no_cell_is_long(lesson):
    cells = json.loads(lesson.read_text())["cells"]
    main, further = main_path_and_going_further(cells)
    words = sum(prose_words(m) for m in main)
    long_cells = [
        f"{prose_words(m)} words: {m.strip().splitlines()[0][:80]!r}"
        for m in main + further
        if prose_words(m) > CELL_WORDS
    ]
    assert words <= MAIN_PATH_WORDS, (
        f"{lesson.name}: {words} words of prose before 'Going further' (at most {MAIN_PATH_WORDS}): move what is "
        "off the main line into a '## NN · Going further: ...' part at the end, or into README"
    )
    assert not long_cells, f"{lesson.name}: markdown cells over {CELL_WORDS} words:\n  " + "\n  ".join(
        long_cells
    )
