"""maintainer_tools.docsite: what the site shows of an executed lesson, and where it finds the lessons."""

from __future__ import annotations

import os
import time

import nbformat
import pytest

from maintainer_tools import docsite
from maintainer_tools.answered import ANSWERED_HEADING, ANSWERED_TAG


def _executed_lesson() -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    bar = nbformat.v4.new_output(
        "display_data",
        data={
            "text/plain": "HBox(children=(...))",
            docsite.WIDGET_VIEW: {"model_id": "box", "version_major": 2},
        },
    )
    nb.cells = [
        nbformat.v4.new_markdown_cell(
            "## 02 · Retries exhausted: `TrainingFailedError`\nNext: [lesson 03](03_ray_data.ipynb)."
        ),
        nbformat.v4.new_code_cell("fit()", outputs=[bar]),
        nbformat.v4.new_markdown_cell(ANSWERED_HEADING),
        nbformat.v4.new_code_cell("answer = 42", metadata={"tags": [ANSWERED_TAG]}),
    ]
    nb.metadata["widgets"] = {
        docsite.WIDGET_STATE: {
            "state": {
                "box": {
                    "model_name": "HBoxModel",
                    "state": {"children": ["IPY_MODEL_left", "IPY_MODEL_bar", "IPY_MODEL_right"]},
                },
                "left": {"model_name": "HTMLModel", "state": {"value": "epoch 0: 100%"}},
                "bar": {"model_name": "FloatProgressModel", "state": {"value": 32, "max": 32}},
                "right": {"model_name": "HTMLModel", "state": {"value": "32/32 [00:09]"}},
            }
        }
    }
    return nb


def test_the_site_shows_the_lesson_as_shipped_with_static_progress_bars_and_a_download_link():
    nb = docsite.static_notebook(_executed_lesson(), "02_ray_train_migration.ipynb")
    sources = ["".join(c.source) for c in nb.cells]
    assert sources[0].startswith('<a href="02_ray_train_migration.ipynb" download>Download this notebook</a>')
    assert not any(ANSWERED_HEADING in s or "answer = 42" in s for s in sources)  # solutions stay hidden
    assert sources[1].startswith("## 02 · Retries exhausted: TrainingFailedError")  # the toc's anchor matches
    assert "[lesson 03](03_ray_data.html)" in sources[1]  # a lesson link opens its page
    data = nb.cells[2].outputs[0]["data"]
    assert docsite.WIDGET_VIEW not in data and "widgets" not in nb.metadata  # no widget scripts to load
    assert data["text/html"] == (
        '<div class="course-progress"><span>epoch 0: 100%</span> <progress value="32" max="32"></progress> '
        "<span>32/32 [00:09]</span></div>"
    )


def test_executed_lessons_takes_the_newest_copy_and_names_what_is_missing(tmp_path):
    (tmp_path / "notebooks").mkdir()
    for name in ("01_a.ipynb", "02_b.ipynb"):
        (tmp_path / "notebooks" / name).write_text("{}")
    course, tests = tmp_path / "build" / "notebooks", tmp_path / "build" / "tests" / "lessons"
    course.mkdir(parents=True)
    tests.mkdir(parents=True)
    (course / "01_a.ipynb").write_text("{}")
    with pytest.raises(docsite.SiteError, match=r"02_b\.ipynb.*Run ./build.sh course first"):
        docsite.executed_lessons(tmp_path)
    (tests / "01_a.ipynb").write_text("{}")
    (tests / "02_b.ipynb").write_text("{}")
    old = time.time() - 3600
    os.utime(course / "01_a.ipynb", (old, old))
    assert docsite.executed_lessons(tmp_path) == {
        "01_a.ipynb": tests / "01_a.ipynb",
        "02_b.ipynb": tests / "02_b.ipynb",
    }


def test_the_site_drops_the_badges_and_links_license_to_its_page():
    text = "# T\n\n[![ci](../../actions/workflows/ci.yml/badge.svg)](../../actions/workflows/ci.yml)\nSee [license](LICENSE).\n"
    assert docsite._site_links(text) == "# T\n\nSee [license](LICENSE.md).\n"


def test_nav_pages_lists_every_page_of_mkdocs_yml():
    pages = docsite.nav_pages()
    assert pages[0] == "index.html" and "notebooks/01_single_gpu_baseline.html" in pages
    assert "docs/benchmarks.html" in pages and "LICENSE.html" in pages
