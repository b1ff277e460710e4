"""Fire-once fault injection for the fault-tolerance lesson and its tests.

A fault is a plain dict (it travels in ``train_loop_config``) naming a marker file in shared
storage. The fault fires only while the marker does not exist and creates it just before
firing: restarted workers are new processes and remember nothing, but the file survives,
so the fault fires exactly once per marker.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any


class InjectedFault(RuntimeError):
    """The error an in-loop crash raises, so the output says plainly it was on purpose."""


def crash_once(
    marker: str | Path, *, rank: int = 1, epoch: int = 1, step: int = 0, how: str = "raise"
) -> dict[str, Any]:
    """A fault spec: ``rank`` fails at ``step`` of ``epoch`` the first time it gets there.

    ``how="raise"`` raises ``InjectedFault`` (a Python error in the loop);
    ``how="kill"`` SIGKILLs the worker's own process (a machine or OOM-killer style death).
    """
    if how not in ("raise", "kill"):
        raise ValueError(f"how must be 'raise' or 'kill', not {how!r}")
    return {"marker": str(Path(marker).resolve()), "rank": rank, "epoch": epoch, "step": step, "how": how}


def fired(spec: dict[str, Any] | None) -> bool:
    """True once the fault described by ``spec`` has fired."""
    return bool(spec) and Path(spec["marker"]).exists()


def maybe_fail(spec: dict[str, Any] | None, *, rank: int, epoch: int, step: int) -> None:
    """Called every step by the training loop; fails once where ``spec`` says."""
    if not spec or (rank, epoch, step) != (spec["rank"], spec["epoch"], spec["step"]):
        return
    marker = Path(spec["marker"])
    if marker.exists():
        return
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text(f"fired on rank {rank} at epoch {epoch} step {step} (pid {os.getpid()})\n")
    print(f"[fault] rank {rank}: injected failure at epoch {epoch}, step {step} ({spec['how']})", flush=True)
    if spec["how"] == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    raise InjectedFault(f"injected failure on rank {rank} at epoch {epoch}, step {step}")
