"""What a lesson opened on its own (Colab, a notebook downloaded alone) runs to install the course.

In a checkout the install cell does nothing. Elsewhere it pip-installs the course (Ray pinned,
PyTorch a range, so the runtime's own torch and torchvision stay), then ``installed_summary`` says
in one line what came. ``./build.sh export`` writes the cell (``maintainer_tools.publish``).
Standard library only: it runs right after pip.
"""

from __future__ import annotations

import json
import re
from typing import Any

KEPT = ("torch", "torchvision")  # the runtime's own, when within pyproject.toml's ranges
_ANSI = re.compile(r"\x1b\[[0-9;]*m")  # pip colours its warnings


def normalise(name: str) -> str:
    """A distribution name as pip compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def installed_summary(pip_run: Any) -> str:
    """One line after the install cell's pip run (a ``subprocess.CompletedProcess`` of ``pip install
    --report=-``, bytes): the course's version, how many packages came (Ray's version among them),
    whether the runtime's torch and torchvision stayed; what pip said on stderr is counted, with its
    first line. pip's JSON report lists what it installed, so nothing is compared before and after."""
    from importlib.metadata import PackageNotFoundError, version

    # in a Jupyter kernel (FORCE_COLOR=1) pip colours its JSON: read past the colour codes
    report = json.loads(_ANSI.sub("", (pip_run.stdout or b"{}").decode()) or "{}")
    came = {
        normalise(item["metadata"]["name"]): item["metadata"]["version"] for item in report.get("install", [])
    }
    others = [name for name in came if name != "course-utils"]
    ray = came.get("ray") or version("ray")
    parts = [
        f"Installed course_utils {version('course_utils')} with {len(others)} package(s) it needs (ray {ray})"
    ]
    kept = []
    for name in KEPT:
        if name in came:
            parts.append(f"installed {name} {came[name]} (this runtime had none in the course's range)")
            continue
        try:
            kept.append(f"{name} {version(name)}")
        except PackageNotFoundError:
            pass
    if kept:
        parts.insert(1, f"kept this runtime's {' and '.join(kept)}")
    said = _ANSI.sub("", (pip_run.stderr or b"").decode(errors="replace"))
    lines = [line.strip() for line in said.splitlines() if line.strip()]
    if lines:
        parts.append(f"pip said {len(lines)} line(s) on stderr, first: {lines[0]}")
    return "; ".join(parts) + "."
