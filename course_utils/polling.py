"""Run a step on a driver thread while a ``with`` block runs (a fit), and once more as it ends.

The progress bar (``progress.fit_progress``) and the metrics sampler (``metrics.sample_metrics``)
both watch a blocking ``trainer.fit()`` from beside it; this is their shared loop.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator


@contextlib.contextmanager
def every(step: Callable[[], None], every_s: float, name: str) -> Iterator[None]:
    """Call ``step()`` now and every ``every_s`` seconds on a daemon thread named ``name`` until the
    block ends, then a last time, so what happened at the very end is seen too. ``step`` handles
    its own errors: one that escapes ends the polling."""
    done = threading.Event()

    def loop() -> None:
        while True:
            last = done.is_set()
            step()
            if last:
                return
            done.wait(every_s)

    thread = threading.Thread(target=loop, name=name, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
