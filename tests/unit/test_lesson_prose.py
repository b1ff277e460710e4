"""Lesson prose never states a figure the notebook measures (issue 20, item 1).

A number with a unit of time, share, speed-up or throughput (s, ms, min, %, ×, images/s, rows/s) in a
lesson's markdown is wrong on the next machine and the next Ray, unless it is a setting or a constant
(Ray's defaults, a value the lesson sets) or says where it was measured. So each such figure must sit
in a sentence that names its source: "default", "constant", "setting", "set", an environment variable
or a ``key=value`` in backticks, "README", "measured on". The cell that measures prints its own reading.
Code (fenced blocks, inline backticks) is not prose.
"""

from __future__ import annotations

import json
import re

import pytest

from tests.notebook_runs import LESSONS

UNIT = r"(?:ms|s|min|minutes?|seconds?|%|×|x|images/s|img/s|rows/s)"
FIGURE = re.compile(rf"(?<![\w.,-])≈?\s?\d[\d,.]*(?:\s?[–-]\s?\d[\d,.]*)?\s?{UNIT}(?![\w/])")
SOURCED = re.compile(
    r"default|constant|setting|\bsets?\b|README|measured on|`[A-Z][A-Z0-9_]{5,}[^`]*`|`[\w.]+=",
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
