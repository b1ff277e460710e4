"""A separate driver process joined to a test cluster through RAY_ADDRESS, as a learner's notebook would be."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from course_utils.config import REPO_ROOT
from maintainer_tools.cluster import LocalCluster


def run_driver(
    cluster: LocalCluster, code: str, *args: str, storage: Path, data: Path, timeout_s: float, **env: str
) -> dict[str, Any]:
    """Run ``code`` (``python -c``, with ``args``) as learner ``tester`` against ``cluster``, its
    COURSE_STORAGE and COURSE_DATA set; return what it printed on its ``RESULT {json}`` line.
    A failed driver fails the test with its output and the cluster's logs."""
    run = subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=REPO_ROOT,
        env={
            **os.environ,
            **cluster.driver_env(),  # RAY_ADDRESS, and token auth on as the cluster's nodes have it
            "COURSE_STORAGE": str(storage),
            "COURSE_DATA": str(data),
            "COURSE_LEARNER": "tester",
            **env,
        },
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    assert run.returncode == 0, (
        f"driver failed:\n{run.stdout[-4000:]}\n{run.stderr[-6000:]}\n{cluster.logs()}"
    )
    return json.loads(next(line for line in run.stdout.splitlines() if line.startswith("RESULT "))[7:])
