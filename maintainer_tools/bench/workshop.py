"""How many learners a cluster holds: 1, 2, 3 and 4 learners at once through lesson 02's fit.

One ``ray start --head`` cluster on this machine (``cluster.LocalCluster``, ``--cpus`` slots, 4 as
the workshop test uses), with its dashboard: the state API it serves is how a learner's fit sees that
it waits for slots inside ``fit()`` (without it every learner's waiting read 0). For each count, that many learners (separate driver processes, distinct
``COURSE_LEARNER``, one shared storage folder and MNIST copy) start at once and each runs lesson 02's
fit through the course's ``make_trainer`` and ``fit_progress`` (``--epochs`` of the smoke profile, 1 by
default). Per count it prints each learner's wall time (driver start to fit end), the time its fit
spent waiting for free slots (``slots.wait_for_slots``), and the machine's CPU utilisation over the
round (the whole cluster runs on this machine, so the machine's CPU is the cluster's). Ends with
``slowdown_at_<n>_learners`` (mean wall time at n over the time alone) for each count.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
from collections.abc import Sequence
from typing import Any

from maintainer_tools.bench.common import print_lines

LEARNER = textwrap.dedent(
    """
    import json, sys, time
    started = time.time()
    from course_utils.core import config, session, training
    from course_utils.core.progress import fit_progress
    from course_utils.lesson_code import train_loop_per_worker

    store = session.start_ray(verbose=False, log_to_driver=False).storage
    profile = config.SMOKE.with_(epochs=int(sys.argv[1]))
    trainer = training.make_trainer(
        "bench-workshop", profile, num_workers=profile.num_workers, store=store, train_loop=train_loop_per_worker
    )
    with fit_progress(trainer, total=profile.epochs) as bar:
        trainer.fit()
    print("RESULT " + json.dumps({"wall_s": time.time() - started, "waited_s": bar.slots_waited_s}), flush=True)
    """
)


class CpuSampler:
    """The machine's CPU utilisation (psutil, all cores) sampled every second while running."""

    def __init__(self) -> None:
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-workshop-cpu", daemon=True)

    def _run(self) -> None:
        import psutil

        psutil.cpu_percent(None)
        while not self._stop.wait(1.0):
            self.samples.append(psutil.cpu_percent(None))

    def __enter__(self) -> CpuSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def mean(self) -> float:
        return statistics.fmean(self.samples) if self.samples else 0.0


def run_round(count: int, epochs: int, env: dict[str, str]) -> tuple[list[dict[str, float]], float]:
    """``count`` learners at once; each one's result and the round's mean CPU utilisation (%)."""
    with CpuSampler() as cpu:
        learners = [
            subprocess.Popen(
                [sys.executable, "-c", LEARNER, str(epochs)],
                env={**env, "COURSE_LEARNER": f"bench-learner-{count}-{i + 1}"},
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for i in range(count)
        ]
        results = []
        for i, process in enumerate(learners):
            out, err = process.communicate(timeout=3600)
            line = next((x for x in out.splitlines() if x.startswith("RESULT ")), None)
            if process.returncode or line is None:
                raise RuntimeError(
                    f"learner {i + 1} of {count} failed (exit {process.returncode}):\n{err[-3000:]}"
                )
            results.append(json.loads(line[7:]))
    return results, cpu.mean


def main(argv: Sequence[str] | None = None) -> dict[int, float]:
    """1..4 learners at once through lesson 02's fit on one cluster: wall, waiting, CPU per count."""
    parser = argparse.ArgumentParser(
        prog="python -m maintainer_tools.bench workshop", description=(main.__doc__ or "").split("\n")[0]
    )
    parser.add_argument(
        "--counts", type=int, nargs="+", default=[1, 2, 3, 4], help="learners at once, per round"
    )
    parser.add_argument("--epochs", type=int, default=1, help="epochs of lesson 02's smoke fit per learner")
    parser.add_argument("--cpus", type=int, default=4, help="CPU slots of the cluster's head node")
    args = parser.parse_args(argv)

    import ray

    from course_utils.core import data
    from maintainer_tools.cluster import LocalCluster, NodeSpec

    data.ensure_mnist(verbose=False)  # prepared once, before the learners share it
    print(
        f"ray: {ray.__version__}\ncluster: 1 node, {args.cpus} CPU slots, on {os.cpu_count()} cores",
        flush=True,
    )
    print(
        f"each learner: lesson 02's fit, 2 workers x 1 CPU, {args.epochs} epoch(s) of the smoke profile",
        flush=True,
    )
    walls: dict[int, float] = {}
    with (
        tempfile.TemporaryDirectory() as storage,
        LocalCluster(NodeSpec(num_cpus=args.cpus), [], dashboard=True) as cluster,
    ):
        env = {**os.environ, **cluster.driver_env(), "COURSE_STORAGE": storage, "COURSE_PROFILE": "smoke"}
        print(f"\n{'learners':>8}  {'learner':>7}  {'wall s':>7}  {'waited s':>8}  {'CPU %':>6}")
        for count in args.counts:
            results, cpu = run_round(count, args.epochs, env)
            for i, r in enumerate(results):
                print(
                    f"{count:>8}  {i + 1:>7}  {r['wall_s']:7.1f}  {r['waited_s']:8.1f}  {cpu:6.0f}",
                    flush=True,
                )
            walls[count] = statistics.fmean(r["wall_s"] for r in results)
    alone = walls.get(1)
    lines: dict[str, Any] = {f"mean_wall_s_at_{n}_learners": w for n, w in walls.items()}
    if alone:
        lines.update({f"slowdown_at_{n}_learners": round(w / alone, 2) for n, w in walls.items() if n != 1})
    print()
    print_lines(lines)
    return walls
