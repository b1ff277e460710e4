"""What the bench package and its modules share: the benches' names (``COMMANDS``) and how each
prints its figures (``print_lines``). The dispatcher (``maintainer_tools.bench``), ``report`` and every
bench import this module, and it imports none of them: no import cycle inside the package.
"""

from __future__ import annotations

from typing import Any

# subcommand -> one-line help; the body is ``maintainer_tools.bench.<subcommand>.main``
COMMANDS: dict[str, str] = {
    "train": "images/s: plain PyTorch vs Ray Train (2x1 CPU, 1x2 CPU) on the same cores (lesson 02); --gpu: on one GPU, with its busy share",
    "ingest": "rows/s: per-row PIL map vs vectorised map_batches vs torch DataLoader (lesson 03)",
    "checkpoint": "seconds a training step waits per checkpoint save, sync vs async upload; share of the epoch (lesson 04)",
    "validation": "epoch seconds: every rank scoring the whole test set vs each rank scoring its share (lesson 02)",
    "recovery": "seconds from a worker's SIGKILL to the next training step; checkpoint share of epoch time (lesson 04)",
    "inference": "images/s: one remote predict call per image vs Ray Data batch inference with an actor pool (lesson 05)",
    "startup": "seconds: a bare 2-worker fit part by part, beside the floor (2 plain actors importing torch)",
    "workshop": "seconds: 1, 2, 3 and 4 learners at once through lesson 02's fit on one cluster: wall, waiting, CPU",
    "hosts": "seconds on three machines: a local COURSE_STORAGE refused, lesson 02's loop as a job, a worker machine lost mid-fit (processes killed, link cut) to Ray noticing and to the next step (lesson 04)",
    "install": "seconds, MB downloaded, venv MB: a learner's first setup with the maintainers' tools (before) and without them (after, requirements.txt alone)",
}


def print_lines(values: dict[str, Any]) -> None:
    """A benchmark's ``name: value`` lines, in order (floats to 3 decimals): the last is its ratio."""
    for key, value in values.items():
        print(f"{key}: {value:.3f}" if isinstance(value, float) else f"{key}: {value}", flush=True)
