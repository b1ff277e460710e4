"""Whether a local folder is one every machine of the Ray cluster sees: a local ``COURSE_STORAGE`` on a
cluster of several machines fails fast, in one sentence, instead of at a worker's first checkpoint.

On one machine (a local Ray, or nodes that all run here) every node sees the driver's disk. On real
machines a folder on the driver's disk is not on the others, and Ray Train fails only once a worker
there reports its first checkpoint, with an error about its own storage marker. The check writes a
probe file into the folder and asks a zero-CPU task on each other node whether it sees it.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

from course_utils.config import CourseConfigError

# (cluster address, folder) pairs found shared in this process: each is probed once.
_seen_everywhere: set[tuple[str, str]] = set()


def _exists(path: str) -> bool:
    return os.path.exists(path)


def machines_without(folder: str | Path, timeout_s: float = 20.0) -> list[str]:
    """The addresses of the cluster's other nodes that do not see ``folder`` (a local path); [] when
    every node does, when Ray is not running, or when a node does not answer within ``timeout_s``
    (a busy node is not called blind)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    if not ray.is_initialized():
        return []
    here = ray.get_runtime_context().get_node_id()
    others = [n for n in ray.nodes() if n["Alive"] and n["NodeID"] != here]
    if not others:
        return []
    probe = Path(folder) / f".course-probe-{uuid.uuid4().hex[:12]}"
    probe.write_text("written by the driver: does every node see this folder?\n")
    try:
        exists = ray.remote(num_cpus=0, max_retries=0)(_exists)
        asked = {
            n["NodeManagerAddress"]: exists.options(
                scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)
            ).remote(str(probe))
            for n in others
        }
        ready, _ = ray.wait(list(asked.values()), num_returns=len(asked), timeout=timeout_s)
        return sorted({ip for ip, ref in asked.items() if ref in ready and not ray.get(ref)})
    finally:
        probe.unlink(missing_ok=True)


def check_storage_shared(folder: str, setting: str = "COURSE_STORAGE") -> None:
    """Raise ``CourseConfigError`` in one sentence when ``folder`` (the local storage a fit will use) is
    not seen by every machine of the cluster; once per cluster and folder in a process."""
    import ray

    if not ray.is_initialized():
        return
    key = (ray.get_runtime_context().gcs_address, str(folder))
    if key in _seen_everywhere:
        return
    blind = machines_without(folder)
    if blind:
        raise CourseConfigError(
            f"{setting}={os.environ.get(setting) or folder} is a folder on this machine only: the cluster's "
            f"machine(s) at {', '.join(blind)} do not see it, so their training workers could not write "
            f"checkpoints there; set {setting} to a shared mount that every machine sees at the same path, "
            "or to s3://bucket/prefix."
        )
    _seen_everywhere.add(key)
