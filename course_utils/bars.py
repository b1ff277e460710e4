"""Progress bars (tqdm) that a saved notebook shows where they ended, not where they began.

In JupyterLab a tqdm bar is a widget; a saved notebook also keeps its text form, which GitHub's
viewer, nbviewer and ``nbconvert --to markdown`` show. tqdm writes that text once, when the bar first
appears ("0/3"). ``bar`` displays the widget under a display id and, when the bar closes, updates
that output with its final text (``3/3 [00:21<00:00, ...]``; nothing for a bar that does not stay,
``leave=False``), so every reader sees what JupyterLab showed. Outside a notebook it is tqdm.auto's
own bar.
"""

from __future__ import annotations

import functools
from typing import Any


def bar(*args: Any, **kwargs: Any) -> Any:
    """``tqdm.auto.tqdm(*args, **kwargs)``; in a notebook, one whose saved text is its final state."""
    from tqdm.auto import tqdm
    from tqdm.notebook import tqdm_notebook

    if not issubclass(tqdm, tqdm_notebook):
        return tqdm(*args, **kwargs)
    return _saved_bar_class()(*args, **kwargs)


@functools.cache
def _saved_bar_class() -> type:
    from IPython.display import display
    from tqdm.notebook import tqdm_notebook

    class SavedBar(tqdm_notebook):
        """tqdm's notebook bar, displayed under a display id that ``close`` updates."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            shown = kwargs.pop("display", True)
            super().__init__(*args, display=False, **kwargs)
            self._handle = None
            if shown and not self.disable and self.delay <= 0:
                self._handle = display(self.container, display_id=True)
                self.displayed = True

        def close(self) -> None:
            handle, self._handle = getattr(self, "_handle", None), None
            super().close()
            if handle is None:
                return
            failed = bool(self.total) and self.n < self.total
            if self.leave or failed:
                bundle = dict(self.container._repr_mimebundle_())
                bundle["text/plain"] = self.container.__repr__(pretty=True)  # the bar as it ends
            else:
                bundle = {"text/plain": ""}  # a bar that does not stay leaves no text
            handle.update(bundle, raw=True)

    return SavedBar
