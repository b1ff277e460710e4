"""One way to execute a lesson, whatever the tier: ``run_lesson(path, tier)``.

A tier is where a learner's path runs a lesson: the laptop with the exercises answered
(``LAPTOP_TIER``), the hosts' head (``HOSTS_TIER``), a workshop learner beside the browser
(``WORKSHOP_TIER``), a cluster that declares GPUs (``GPU_SHAPED_TIER``), a Colab-shaped venv
(``harness.colab``), ``./build.sh course`` (``course``). What
differs between them is data in ``Tier``: the folder the executed copy lands in (the kernel starts
there), whether the published solutions are pasted in, and which kernel runs it with what environment.
What places the run (a network namespace, a cluster, a browser) stays with each tier's harness; the run
itself is this function, so every tier reads its result, its failing cell and its kernel's terminal
the same way.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

import nbformat
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import AsyncKernelManager
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError
from nbformat import NotebookNode
from nbmake.nb_result import NotebookError, NotebookResult

from course_utils.core.config import build_root
from maintainer_tools.answered import answered_notebook

KERNEL = "ray-train-course"  # the kernel every lesson names (./build.sh setup installs it)


@dataclass(frozen=True)
class Tier:
    """Where and how a lesson runs.

    ``name`` is the folder under ``build/tests`` that holds the executed copy (the kernel starts there),
    unless ``folder`` says another; ``answered`` pastes each exercise's published solution in after the
    lesson (``maintainer_tools.answered``); ``kernel`` is the kernel spec's name, looked up in
    ``kernels`` when given (a venv's own spec) or among the installed ones; ``env``, when given, is the
    kernel's whole environment (nothing of this process's), else it inherits this process's.
    """

    name: str
    answered: bool = False
    kernel: str = KERNEL
    kernels: Path | None = None
    env: Mapping[str, str] | None = field(default=None, hash=False)
    folder: Path | None = None

    def named(self, name: str) -> Tier:
        """The same tier with its copies in another folder (one per learner, one per cluster shape)."""
        return replace(self, name=name)

    @property
    def out_dir(self) -> Path:
        return self.folder if self.folder is not None else build_root() / "tests" / self.name


# The tiers (their paths' names are notebook_runs' LAPTOP, ANSWERED, HOSTS, BROWSER, GPU_SHAPED, COLAB).
LAPTOP_TIER = Tier("lessons", answered=True)  # the lessons as shipped, then their exercises answered
HOSTS_TIER = Tier("hosts")  # the head host of three sharing only the network
WORKSHOP_TIER = Tier("workshop")  # a workshop learner beside the browser's (named per learner)
GPU_SHAPED_TIER = Tier("gpu-shaped")  # a cluster that declares GPUs (named per count)
EDITED_TIER = Tier("edited-loop")  # a lesson a test edited first, as a learner edits a cell


def course(out_dir: Path) -> Tier:
    """``./build.sh course``: executed copies in ``out_dir/notebooks``."""
    return Tier("course", folder=out_dir / "notebooks")


@dataclass
class LessonRun(NotebookResult):
    """What a run left: the executed notebook, its first error (nbmake's form: pytest's report shows the
    cell), the executed copy, the seconds it took and the file the kernel's own stderr went to."""

    copy: Path = Path()
    seconds: float = 0.0
    kernel_log: Path = Path()

    @property
    def ok(self) -> bool:
        return self.error is None

    def terminal(self) -> str:
        """What the kernel process printed to its terminal (Ray's native logs, a stack on stop)."""
        return self.kernel_log.read_text(errors="replace") if self.kernel_log.is_file() else ""

    def printed(self, stream: str = "stdout") -> str:
        """Everything the lesson's cells printed on ``stream``."""
        return "".join(
            out.get("text", "")
            for cell in self.nb.cells
            for out in cell.get("outputs", [])
            if out.get("name") == stream
        )


def run_lesson(
    lesson: Path, tier: Tier, *, timeout_s: int = 600, nb: NotebookNode | None = None
) -> LessonRun:
    """Execute ``lesson`` (or ``nb``, a copy a test edited) on ``tier`` in a fresh kernel; save the executed copy.

    Seconds count from the kernel's start. The kernel's stderr goes to ``logs/<tier>-<lesson>.kernel.log``
    beside the copy's folder, not the terminal: what the lesson printed is in the copy.
    """
    if nb is None:
        nb = answered_notebook(lesson) if tier.answered else nbformat.read(str(lesson), as_version=4)
    out_dir = tier.out_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    copy = out_dir / Path(lesson).name
    kernel_log = out_dir.parent / "logs" / f"{tier.name}-{copy.stem}.kernel.log"
    kernel_log.parent.mkdir(exist_ok=True)
    km = None
    if tier.kernels is not None:
        specs = KernelSpecManager(kernel_dirs=[str(tier.kernels)])
        km = AsyncKernelManager(kernel_name=tier.kernel, kernel_spec_manager=specs)
    client = NotebookClient(nb, km=km, kernel_name=tier.kernel, timeout=timeout_s, record_timing=True)
    extra = {} if tier.env is None else {"env": dict(tier.env)}
    started = time.monotonic()
    error = None
    with open(kernel_log, "w") as log:
        try:
            client.execute(cwd=str(out_dir), stderr=log, cleanup_kc=True, **extra)
        except (CellTimeoutError, DeadKernelError) as exc:  # the cell it stopped in shows no error
            index = next((i for i, c in enumerate(nb.cells) if _unfinished(c)), -1)
            error = NotebookError(str(exc).split("\n")[0], str(exc), index)
        except CellExecutionError as exc:
            error = _last_error(nb) or NotebookError(str(exc).split("\n")[0], str(exc), -1)
    nbformat.write(nb, str(copy))
    return LessonRun(nb, error, copy, time.monotonic() - started, kernel_log)


def _unfinished(cell: NotebookNode) -> bool:
    """A code cell the kernel never answered (the one a timeout or a dead kernel stopped, or one after it)."""
    return cell.cell_type == "code" and "shell.execute_reply" not in cell.metadata.get("execution", {})


def _last_error(nb: NotebookNode) -> NotebookError | None:
    """The last cell that shows an error (cells tagged ``raises-exception``, which fail on purpose, come before
    it: nbclient goes on after them): its exception line, its source and traceback (as nbmake reports)."""
    for index in reversed(range(len(nb.cells))):
        cell = nb.cells[index]
        errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
        if cell.cell_type == "code" and errors:
            trace = "\n".join(errors[0].get("traceback", []))
            return NotebookError(trace.split("\n")[-1], f"{'-' * 75}\n{cell.source}\n{trace}", index)
    return None


def error_text(result: NotebookResult) -> str:
    """The failing cell's summary and traceback, for an assertion message."""
    if result.error is None:
        return ""
    return f"cell {result.error.failing_cell_index}: {result.error.summary}\n{result.error.trace[-4000:]}"
