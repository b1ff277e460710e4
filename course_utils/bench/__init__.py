"""``python -m course_utils.bench {train,ingest,checkpoint,validation,recovery,inference,startup,workshop,hosts,install}``: side-by-side measurements.

Each subcommand measures the alternatives a lesson compares in one process run and prints
``name: value`` lines, ending with the ratio that matters. Every benchmark lives in this package,
one module each (``train``, ``ingest``, ``checkpoint``, ``validation``, ``recovery``, ``inference``, ``startup``, ``workshop``, ``hosts``, ``install``), with a ``main(argv)`` that
parses its own options (``python -m course_utils.bench ingest --help``). The lessons never import
this package; it imports the domain modules whose code it measures.

``record <bench>`` runs a bench and stores its figures in ``pinned.json``; ``docs`` writes
``docs/benchmarks.md`` from that file (``course_utils.bench.report``).
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Sequence
from typing import Any

from course_utils.compare import steady as steady  # re-exported: the benches' one epoch-throughput rule

# subcommand -> one-line help; the body is ``course_utils.bench.<subcommand>.main``
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


def main(argv: Sequence[str] | None = None) -> None:
    """Parse the subcommand and hand the rest of the command line to its benchmark."""
    parser = argparse.ArgumentParser(prog="python -m course_utils.bench", description=__doc__.split("\n")[0])
    if list(argv or [])[:1] in (["record"], ["docs"]):  # re-measure and store a bench; write the page
        from course_utils.bench import report

        report.main(list(argv or []))
        return
    sub = parser.add_subparsers(dest="command", required=True, metavar="{" + ",".join(COMMANDS) + "}")
    for name, help_text in COMMANDS.items():
        sub.add_parser(name, help=help_text, add_help=False)
    args, rest = parser.parse_known_args(argv)
    importlib.import_module(f"course_utils.bench.{args.command}").main(rest)
