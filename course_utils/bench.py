"""``python -m course_utils.bench {train,ingest,recovery,inference}``: side-by-side measurements.

Each subcommand measures the alternatives a lesson compares in one process run and prints
``name: value`` lines, ending with the ratio that matters. This file only dispatches; each
benchmark's body lives next to the code it measures and parses its own options
(``python -m course_utils.bench ingest --help``).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

# subcommand -> (module, function taking the remaining argv, one-line help)
COMMANDS: dict[str, tuple[str, str, str]] = {
    "train": (
        "course_utils.training",
        "bench_train",
        "images/s: plain PyTorch vs Ray Train (2x1 CPU, 1x2 CPU) on the same cores (lesson 02)",
    ),
    "ingest": (
        "course_utils.raydata",
        "bench_ingest",
        "rows/s: per-row PIL map vs vectorised map_batches vs torch DataLoader (lesson 03)",
    ),
    "recovery": (
        "course_utils.resumable",
        "bench_recovery",
        "seconds from a worker's SIGKILL to the next training step; checkpoint share of epoch time (lesson 04)",
    ),
    "inference": (
        "course_utils.inference",
        "bench_inference",
        "images/s: one remote predict call per image vs Ray Data batch inference with an actor pool (lesson 05)",
    ),
}


def main(argv: Sequence[str] | None = None) -> None:
    """Parse the subcommand and hand the rest of the command line to its benchmark."""
    parser = argparse.ArgumentParser(prog="python -m course_utils.bench", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="{" + ",".join(COMMANDS) + "}")
    for name, (_, _, help_text) in COMMANDS.items():
        sub.add_parser(name, help=help_text, add_help=False)
    args, rest = parser.parse_known_args(argv)
    module, function, _ = COMMANDS[args.command]
    getattr(importlib.import_module(module), function)(rest)


if __name__ == "__main__":
    main(sys.argv[1:])
