"""A lesson the way Colab runs it: alone in an empty folder, in a Python that has never seen the course.

Colab opens one notebook from GitHub in a runtime whose Python already holds PyTorch and the usual data
stack, in ``/content``. Here: a fresh virtualenv made with the course's base Python, holding only a
preinstalled stack like Colab's (``STACK``, with what those packages require), an empty folder outside
any checkout with the lesson copied into it, and a kernel that starts there. The lesson's own install
cell (``course_utils.core.install``) then installs the course, pointed by ``COURSE_SOURCE`` (standing for
GitHub) at a wheel built from this checkout; every other package comes from the package index as on
Colab (pip's cache makes it quick). Used by ``tests/colab_tier`` and by the weekly canary.

Where the stack comes from: the versions of ``requirements.lock`` (what CI runs), taken from the
course's own ``.venv`` as hard links of their installed files (``dist.files``), so that a 5 GB PyTorch
is neither downloaded nor unpacked again. pip sees them as installed packages, as it sees Colab's.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from importlib.metadata import Distribution, distribution
from pathlib import Path

from packaging.requirements import Requirement

from course_utils.core.install import normalise
from maintainer_tools.checkout import REPO_ROOT
from maintainer_tools.harness import tiers
from maintainer_tools.harness.tiers import LessonRun, Tier

# What a Colab runtime has before a lesson runs (the list), by distribution name.
STACK = (
    "torch",
    "torchvision",
    "numpy",
    "pandas",
    "matplotlib",
    "pyarrow",
    "ipykernel",
    "ipywidgets",
    "tqdm",
)
KERNEL = "colab-shaped"
# Lessons CI runs this way at each push (the weekly job and the weekly canary run all six:
# COURSE_COLAB_LESSONS=all). One is enough for what this tier adds (the install cell against a Colab-like
# stack, a notebook alone in /content, the wheel's modules imported there): lesson 06 alone starts Ray, a
# model actor and cleans its storage from the installed wheel, in the least time. Lesson 05 alone (which
# trains lesson 02's run first) runs at each push on the GPU-shaped tier; every lesson's cells run in the
# laptop and hosts tiers.
CI_LESSONS = ("06",)


def stack_closure(names: tuple[str, ...] = STACK) -> dict[str, Distribution]:
    """The stack's distributions in this Python, with every distribution they require (markers
    evaluated here, extras not followed), by normalised name."""
    found: dict[str, Distribution] = {}
    todo = list(names)
    while todo:
        name = normalise(todo.pop())
        if name in found:
            continue
        dist = distribution(name)
        found[name] = dist
        for line in dist.requires or []:
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return found


def make_venv(root: Path) -> Path:
    """A fresh virtualenv at ``root`` holding the stack (hard links of this Python's installed files);
    returns its python. pip and setuptools are the venv's own."""
    subprocess.run([sys._base_executable, "-m", "venv", str(root)], check=True)
    python = root / "bin" / "python"
    purelib = Path(sysconfig.get_path("purelib"))
    target = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    present = {normalise(p.name.split("-")[0]) for p in target.glob("*.dist-info")}
    for name, dist in stack_closure().items():
        if name in present:
            continue
        for file in dist.files or []:
            source = Path(dist.locate_file(file)).resolve()
            if not source.is_file() or not source.is_relative_to(purelib):
                continue  # console scripts in bin/ (they name this venv's python): a kernel needs none
            dest = target / source.relative_to(purelib)
            dest.parent.mkdir(parents=True, exist_ok=True)
            if not dest.exists():
                os.link(source, dest)
    return python


def build_wheel(out: Path) -> Path:
    """A wheel of this checkout as it is now (committed or not), built from a copy of its files so
    that setuptools' build folder does not land in the course's ``build/``."""
    files = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO_ROOT,
        check=True,
        capture_output=True,
    ).stdout.split(b"\0")
    src = out / "src"
    for name in filter(None, (f.decode() for f in files)):
        if (REPO_ROOT / name).is_file():
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO_ROOT / name, src / name)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(out),
            str(src),
        ],
        check=True,
    )
    return next(out.glob("course_utils-*.whl"))


def home_files(root: Path) -> list[str]:
    """What a run at ``root`` wrote in the kernel's own home, outside a hidden folder (.cache, .config:
    the libraries' caches): a lesson's output there would have landed outside its folder."""
    home = root / "home"
    return sorted(
        str(p.relative_to(home))
        for p in home.rglob("*")
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(home).parts)
    )


def run_lesson(lesson: Path, root: Path, wheel: Path, *, timeout_s: int = 900) -> LessonRun:
    """``lesson`` alone in ``root/content`` (an empty folder), run in a fresh Colab-shaped venv at
    ``root/venv`` with the course installed by the lesson's install cell from ``wheel``."""
    python = make_venv(root / "venv")
    kernels = root / "jupyter" / "kernels"
    (kernels / KERNEL).mkdir(parents=True)
    (kernels / KERNEL / "kernel.json").write_text(
        json.dumps(
            {
                "argv": [str(python), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                "display_name": "Colab-shaped",
                "language": "python",
                "env": {
                    "COURSE_SOURCE": wheel.resolve().as_uri(),
                    # "auto" on Colab: full with its GPU
                    "COURSE_PROFILE": os.environ.get("COURSE_PROFILE", "smoke"),
                },
            }
        )
    )
    # A clean environment: nothing of the course's venv or settings.
    keep = ("HOME", "LANG", "PATH", "USER", "LOGNAME", "PIP_CACHE_DIR", "RAY_TMPDIR")
    clean = {k: v for k, v in os.environ.items() if k in keep or k.startswith(("PIP_", "LC_"))}
    clean["PATH"] = os.pathsep.join(p for p in clean.get("PATH", "").split(os.pathsep) if ".venv" not in p)
    # A home of its own, so that whatever the lesson writes outside its folder shows up (``home_files``);
    # pip's cache stays the machine's, as Colab's stays between sessions of a runtime.
    clean["PIP_CACHE_DIR"] = os.environ.get("PIP_CACHE_DIR") or str(Path.home() / ".cache" / "pip")
    clean["HOME"] = str(root / "home")
    (root / "home").mkdir()
    # pip as on Colab: the package index alone, not this machine's pip.conf (its local index folders
    # are warned about, one line per package, in the install cell's summary).
    clean["PIP_CONFIG_FILE"] = os.devnull
    # The lesson alone in an empty folder (``mkdir`` fails if it is not new), its kernel the venv's spec above
    # with the clean environment alone.
    content = root / "content"
    content.mkdir(parents=True)
    tier = Tier("colab", kernel=KERNEL, kernels=kernels, env=clean, folder=content)
    return tiers.run_lesson(lesson, tier, timeout_s=timeout_s)
