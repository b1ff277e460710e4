"""course_utils.core.progress.progress_bar: a progress bar's saved text is its final state (a kernel runs the bars)."""

from __future__ import annotations

import nbformat
from nbclient import NotebookClient

from course_utils.core import progress
from maintainer_tools.harness.notebook_runs import WIDGET_VIEW, progress_text_not_final

CODE = """\
from course_utils.core import progress
for i in progress.progress_bar(range(3), desc="outer"):
    for j in progress.progress_bar(range(4), desc="inner", leave=False):
        pass
stopped = progress.progress_bar(total=5, desc="stopped")
stopped.update(2)
stopped.close()
"""


def test_a_saved_notebook_shows_each_bar_where_it_ended():
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(CODE)]
    NotebookClient(nb, kernel_name="ray-train-course", timeout=60).execute()
    texts = [(o["data"].get("text/plain", ""), WIDGET_VIEW in o["data"]) for o in nb.cells[0].outputs]
    widgets = [text for text, widget in texts if widget]
    assert widgets[0].startswith("outer: 100%") and "3/3 [" in widgets[0], texts
    assert [text for text, widget in texts if not widget] == ["", "", ""], texts  # leave=False: no text
    assert "2/5 [" in widgets[1], texts  # a bar that stopped short says where
    assert progress_text_not_final(nb) == []  # the stopped bar's text is its last state too
    # what tqdm alone saves: the text of the bar's first moment, behind a widget that ended at 3
    first = next(o for o in nb.cells[0].outputs if WIDGET_VIEW in o["data"])
    first["data"]["text/plain"] = "outer:   0%|          | 0/3 [00:00<?, ?it/s]"
    assert progress_text_not_final(nb) == [
        "cell 0: a progress bar saved as 'outer:   0%|          | 0/3 [00:00<?, ?it/s]'"
    ]


def test_outside_a_notebook_it_is_tqdms_own_bar():
    from tqdm.auto import tqdm
    from tqdm.notebook import tqdm_notebook

    made = progress.progress_bar(range(2), disable=True)
    assert type(made) is tqdm and not isinstance(made, tqdm_notebook)
