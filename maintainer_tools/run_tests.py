"""``./build.sh test``'s pytest, whose exit code is pytest's verdict and nothing else.

Once ``pytest.main`` has returned (every test reported, the summary printed), a Ray this process still
runs is shut down and the process ends at once, without the interpreter's teardown: there the C++
destructors of Ray, torch and ZMQ run in whatever order, and once, after a 45-minute run had printed
"971 passed", one aborted with ``std::bad_alloc`` (exit 134), which CI read as a failure.
"""

from __future__ import annotations

import os
import sys

import pytest


def main(argv: list[str]) -> int:
    """Run pytest with ``argv``; end the process with its exit code."""
    code = int(pytest.main(argv))
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        ray.shutdown()  # what Ray's own atexit hook would do: no raylet of ours is left running
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    main(sys.argv[1:])
