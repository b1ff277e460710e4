"""A step repeated on a driver thread while a block runs: what a progress bar, a metrics sampler and
a GPU sampler each poll with."""

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
