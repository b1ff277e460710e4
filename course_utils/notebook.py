"""Small display helpers for the notebooks."""

from __future__ import annotations

import inspect


def show_source(obj) -> None:
    """Show the source of a ``course_utils`` function in the notebook (highlighted in Jupyter).

    Lessons run the library's code rather than a copy pasted into a cell, and show it with
    this, so what the learner reads is exactly what runs.
    """
    source = inspect.getsource(obj)
    try:
        from IPython.display import Markdown, display

        display(Markdown(f"`{obj.__module__}.{obj.__qualname__}`\n```python\n{source}\n```"))
    except ImportError:
        print(source)
