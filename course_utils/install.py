"""What a lesson opened on its own (Colab, a notebook downloaded alone) runs to install the course.

The install cell runs before anything else in a lesson. In a checkout (``./build.sh setup``)
``course_utils`` imports and the cell does nothing. Elsewhere it pip-installs the course with
pyproject.toml's dependencies: Ray pinned, PyTorch a range, so the runtime's own torch and
torchvision stay; then ``installed_summary`` says in one line what came. The cell's text, and the
links above it, are written into every lesson from pyproject.toml's ``[tool.course]`` by
``./build.sh export`` (``maintainer_tools.publish``). Standard library only: it runs right after pip.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

KEPT = ("torch", "torchvision")  # the runtime's own, when within pyproject.toml's ranges
_ANSI = re.compile(r"\x1b\[[0-9;]*m")  # pip colours its warnings


def normalise(name: str) -> str:
    """A distribution name as pip compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def installed_summary(before: Mapping[str, str], seconds: float, pip_stderr: str = "") -> str:
    """One line after the install cell's pip run: the course's version, how many packages came or
    changed (Ray's version among them), whether the runtime's torch and torchvision stayed, and how
    long it took; pip's warnings (kept from a successful run) are counted, with the first one."""
    from importlib.metadata import distributions, version

    was = {normalise(name): ver for name, ver in before.items()}
    now = {normalise(d.name): d.version for d in distributions()}
    changed = sorted(name for name, ver in now.items() if was.get(name) != ver and name != "course-utils")
    parts = [
        f"Installed course_utils {version('course_utils')} with {len(changed)} package(s) it needs "
        f"(ray {now.get('ray', 'missing')}) in {seconds:.0f} s"
    ]
    kept = [f"{name} {was[name]}" for name in KEPT if name in was and now.get(name) == was[name]]
    if kept:
        parts.append(f"kept this runtime's {' and '.join(kept)}")
    for name in KEPT:
        if name in was and now.get(name) != was[name]:
            parts.append(
                f"replaced this runtime's {name} {was[name]} with {now.get(name)} (outside the course's range)"
            )
    warnings = [_ANSI.sub("", line).strip() for line in pip_stderr.splitlines() if line.strip()]
    if warnings:
        parts.append(f"pip warned ({len(warnings)} line(s)), first: {warnings[0]}")
    return "; ".join(parts) + "."
