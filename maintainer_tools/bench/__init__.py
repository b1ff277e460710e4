"""``python -m maintainer_tools.bench {train,ingest,checkpoint,validation,recovery,inference,startup,workshop,hosts,install}``: side-by-side measurements.

Each subcommand measures the alternatives a lesson compares in one process run and prints
``name: value`` lines, ending with the ratio that matters. Every benchmark lives in this package,
one module each (``train``, ``ingest``, ``checkpoint``, ``validation``, ``recovery``, ``inference``, ``startup``, ``workshop``, ``hosts``, ``install``), with a ``main(argv)`` that
parses its own options (``python -m maintainer_tools.bench ingest --help``). The lessons never import
this package; it imports the domain modules whose code it measures.

``record <bench>`` runs a bench and stores its figures in ``pinned.json``; ``docs`` writes
``docs/benchmarks.md`` from that file (``maintainer_tools.bench.report``). The benches' names and
``print_lines`` are in ``maintainer_tools.bench.common``, which the dispatcher, ``report`` and every bench
import.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Sequence

from maintainer_tools.bench.common import COMMANDS


def main(argv: Sequence[str] | None = None) -> None:
    """Parse the subcommand and hand the rest of the command line to its benchmark."""
    parser = argparse.ArgumentParser(
        prog="python -m maintainer_tools.bench", description=__doc__.split("\n")[0]
    )
    if list(argv or [])[:1] in (["record"], ["docs"]):  # re-measure and store a bench; write the page
        from maintainer_tools.bench import report

        report.main(list(argv or []))
        return
    sub = parser.add_subparsers(dest="command", required=True, metavar="{" + ",".join(COMMANDS) + "}")
    for name, help_text in COMMANDS.items():
        sub.add_parser(name, help=help_text, add_help=False)
    args, rest = parser.parse_known_args(argv)
    importlib.import_module(f"maintainer_tools.bench.{args.command}").main(rest)
