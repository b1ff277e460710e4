"""``python -m maintainer_tools.bench install``: a learner's first setup, before and after the tools moved out.

Until requirements-dev.txt was split off, ``./build.sh setup`` installed the maintainers' tools too
(Playwright, MkDocs, moto, pytest, nbmake, ruff, actionlint). This bench installs both ways, one after
the other in one run, each into a fresh venv (``python3.11 -m venv``) with its own empty pip cache:

- ``before``: ``pip install -r requirements.txt -r requirements-dev.txt -c requirements.lock``;
- ``after``: ``pip install -r requirements.txt -c requirements.lock`` (what setup installs now).

For each: the seconds of that ``pip install`` (the venv and its pip upgrade come first, untimed, the
same for both); the wheels pip downloaded (the sizes its ``Downloading ... (size)`` lines give); the
wheels it took from this machine's disk instead (a local index or ``--find-links``: ``file://`` in
its ``--report``; torch, torchvision and the nvidia-* CUDA wheels on the course machine, named in a
line of their own); the two added, which is what a learner downloads from PyPI where nothing is
local; the venv's size on disk (as ``du``). pip's own cache is not the measure: a registry mirror
may serve wheels uncacheable, which leaves the cache empty (it did on the course machine), and a
machine-wide byte counter counts whatever else runs. ``after`` runs first, so a warm disk cache can
only favour ``before``. Each venv is then checked (in ``after`` every ``course_utils`` module
imports and no dev tool is there) and deleted. Ends with ``after`` over ``before`` for all wheels.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from course_utils.core.config import REPO_ROOT
from maintainer_tools.bench.common import print_lines

MB = 1_000_000
# name -> requirement files, in the order measured (after first: a warm disk cache can only favour before)
VARIANTS: dict[str, tuple[str, ...]] = {
    "after": ("requirements.txt",),
    "before": ("requirements.txt", "requirements-dev.txt"),
}
# Import names of the tools requirements-dev.txt holds: none may be in a learner's venv.
DEV_TOOLS = (
    "pytest",
    "pytest_timeout",
    "nbmake",
    "playwright",
    "mkdocs",
    "material",
    "mkdocs_jupyter",
    "moto",
    "ruff",
)
# What `./build.sh lab` and `course` run beside course_utils (course: the course runner, one of the tools).
LEARNER_IMPORTS = (
    "jupyterlab",
    "ipykernel",
    "ipywidgets",
    "nbclient",
    "nbconvert",
    "maintainer_tools.run_course",
)
NEEDS_FREE_BYTES = 12_000_000_000  # one venv with torch's CUDA wheels (~7 GB) and its downloads
_DOWNLOADING = re.compile(r"^\s*Downloading \S+ \((?P<size>[\d.]+) (?P<unit>bytes|kB|MB|GB)\)", re.M)
_UNITS = {"bytes": 1, "kB": 1_000, "MB": MB, "GB": 1_000_000_000}


@dataclass
class Install:
    """What one fresh install took and left."""

    seconds: float
    downloaded: int  # bytes of wheels pip downloaded
    local: int  # bytes of wheels pip took from this machine's disk
    venv: int  # bytes the venv takes on disk
    packages: int
    local_wheels: tuple[tuple[str, int], ...] = ()  # (package, bytes) of each, largest first


def downloaded_bytes(pip_output: str) -> int:
    """Bytes pip downloaded, from its ``Downloading <file> (<size> <unit>)`` lines (sizes as it rounds them)."""
    return round(sum(float(m["size"]) * _UNITS[m["unit"]] for m in _DOWNLOADING.finditer(pip_output)))


def local_wheels(report: dict[str, Any]) -> tuple[tuple[str, int], ...]:
    """(package, bytes) of each ``file://`` archive a ``pip install --report`` installed from, largest first."""
    found = []
    for item in report.get("install", []):
        info = item.get("download_info", {})
        url = info.get("url", "")
        if url.startswith("file://") and "dir_info" not in info:
            name = item.get("metadata", {}).get("name") or Path(urlparse(url).path).name
            found.append((name, Path(unquote(urlparse(url).path)).stat().st_size))
    return tuple(sorted(found, key=lambda wheel: -wheel[1]))


def disk_usage(root: Path) -> int:
    """Bytes ``root`` takes on disk, each file once (``du -s -B1``)."""
    seen, total = set(), 0
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            info = os.lstat(os.path.join(folder, name))
            if (info.st_dev, info.st_ino) not in seen:
                seen.add((info.st_dev, info.st_ino))
                total += info.st_blocks * 512
    return total + os.lstat(root).st_blocks * 512


def pip_env(cache: Path) -> dict[str, str]:
    """This machine's pip settings (its index, find-links, constraints), an empty cache of its own."""
    return {
        **os.environ,
        "PIP_CACHE_DIR": str(cache),
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "PIP_NO_INPUT": "1",
    }


def install(name: str, files: Sequence[str], python: str, workdir: Path) -> tuple[Install, Path]:
    """A fresh venv with its pip upgraded (untimed), then ``files`` with the lock, timed."""
    venv, cache, report = (
        workdir / f"venv-{name}",
        workdir / f"pip-cache-{name}",
        workdir / f"report-{name}.json",
    )
    env = pip_env(cache)
    subprocess.run([python, "-m", "venv", str(venv)], check=True)
    py = str(venv / "bin" / "python")
    subprocess.run([py, "-m", "pip", "install", "--quiet", "--upgrade", "pip"], env=env, check=True)
    requirements = [arg for f in files for arg in ("-r", str(REPO_ROOT / f))]
    command = [py, "-m", "pip", "install", "--progress-bar", "off", "--report", str(report), *requirements]
    command += ["-c", str(REPO_ROOT / "requirements.lock")]
    print(
        f"install: {name}: pip install {' '.join(f'-r {f}' for f in files)} -c requirements.lock", flush=True
    )
    started = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"pip install for {name} failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    installed = json.loads(report.read_text())
    local = local_wheels(installed)
    return Install(
        seconds=seconds,
        downloaded=downloaded_bytes(done.stdout),
        local=sum(size for _, size in local),
        venv=disk_usage(venv),
        packages=len(installed["install"]),
        local_wheels=local,
    ), venv


def check_learner_venv(venv: Path) -> int:
    """Every ``course_utils`` module and what lab and course run import; no dev tool is there. The count."""
    modules = sorted(p.stem for p in (REPO_ROOT / "course_utils").glob("*.py") if p.stem != "__init__")
    code = (
        "import importlib, importlib.util, sys\n"
        f"dev = [m for m in {DEV_TOOLS!r} if importlib.util.find_spec(m)]\n"
        "assert not dev, f'dev tools in the learner venv: {dev}'\n"
        f"for m in {LEARNER_IMPORTS!r} + tuple('course_utils.' + m for m in {modules!r}):\n"
        "    importlib.import_module(m)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run([str(venv / "bin" / "python"), "-c", code], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"the learner venv does not hold what the course needs:\n{done.stderr[-3000:]}")
    return len(modules) + len(LEARNER_IMPORTS)


def check_tools_venv(venv: Path) -> None:
    """The before venv has the tools (else it measured nothing)."""
    code = f"import importlib.util; assert all(importlib.util.find_spec(m) for m in {DEV_TOOLS!r})"
    subprocess.run([str(venv / "bin" / "python"), "-c", code], check=True)


def figures(before: Install, after: Install) -> dict[str, Any]:
    """The bench's lines: each install's figures, then what the split saved, then after over before."""
    values: dict[str, Any] = {
        "before_seconds": before.seconds,
        "after_seconds": after.seconds,
        "before_downloaded_mb": before.downloaded / MB,
        "after_downloaded_mb": after.downloaded / MB,
        "before_local_wheels_mb": before.local / MB,
        "after_local_wheels_mb": after.local / MB,
        "before_wheels_mb": (before.downloaded + before.local) / MB,
        "after_wheels_mb": (after.downloaded + after.local) / MB,
        "before_venv_mb": before.venv / MB,
        "after_venv_mb": after.venv / MB,
        "before_packages": float(before.packages),
        "after_packages": float(after.packages),
        "packages_left_out": float(before.packages - after.packages),
        "seconds_saved": before.seconds - after.seconds,
        "wheels_mb_saved": (before.downloaded + before.local - after.downloaded - after.local) / MB,
        "venv_mb_saved": (before.venv - after.venv) / MB,
        "after_over_before_seconds": after.seconds / before.seconds,
        "after_over_before_venv": after.venv / before.venv,
        "after_over_before_wheels": (after.downloaded + after.local) / (before.downloaded + before.local),
    }
    return values


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Install both ways, print each one's figures and what the split saved."""
    parser = argparse.ArgumentParser(
        prog="python -m maintainer_tools.bench install", description=(__doc__ or "").split("\n")[0]
    )
    parser.add_argument(
        "--python", default="python3.11", help="the Python the venvs are made with (python3.11)"
    )
    parser.add_argument(
        "--dir", type=Path, default=None, help="where the venvs go (default: a temporary folder)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the venvs and pip's reports (for a look)")
    args = parser.parse_args(argv)
    python = shutil.which(args.python) or sys.exit(
        f"install: no {args.python} on PATH (--python names another)"
    )
    base = args.dir or Path(tempfile.gettempdir())
    base.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(base).free
    if free < NEEDS_FREE_BYTES:
        print(
            f"install: not run here ({free / 1e9:.0f} GB free in {base}; one venv and its wheels need about 12 GB)"
        )
        return {}
    workdir = Path(tempfile.mkdtemp(prefix="course-bench-install-", dir=base))
    measured: dict[str, Install] = {}
    try:
        for name, files in VARIANTS.items():
            measured[name], venv = install(name, files, python, workdir)
            if name == "after":
                print(
                    f"install: after: {check_learner_venv(venv)} modules import, no dev tool there",
                    flush=True,
                )
            else:
                check_tools_venv(venv)
            if not args.keep:
                shutil.rmtree(venv)
                shutil.rmtree(workdir / f"pip-cache-{name}", ignore_errors=True)
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            print(f"install: kept {workdir}")
    before, after = measured["before"], measured["after"]
    largest = ", ".join(f"{name} {size / MB:.0f} MB" for name, size in before.local_wheels[:6])
    print(
        f"local_wheels: {len(before.local_wheels)} of before's wheels came from this machine's disk, not the"
        f" network (largest: {largest or 'none'}); *_wheels_mb adds them to *_downloaded_mb: what a learner"
        " downloads from PyPI where nothing is local",
        flush=True,
    )
    values = figures(before, after)
    print_lines(values)
    return values
