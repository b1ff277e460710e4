"""``python -m maintainer_tools.bench startup``: where a fit's seconds go before and after training.

A bare fit (2 workers, a loop that reports once) is timed part by part from timestamps Ray and
the loop record: the driver's ``fit()`` call and return, each actor-creation and actor task's
state changes from Ray's state API (``ray.util.state.list_tasks``: created, running, finished),
the placement group's creation latency (``list_placement_groups``), and the loop's own clock.
Beside it, the floor: two plain Ray actors that import what a training worker needs. Then the
course's own per-fit work: the same bare loop through ``training.make_trainer`` (its checks),
with ``history.ReportLog``, ``progress.fit_progress`` and ``metrics.sample_metrics`` as lesson 02
runs it. Fits and floors alternate, and each row is the median over the rounds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from course_utils.core.config import temporary_env
from course_utils.core.storage import resolve as resolve_storage
from maintainer_tools.bench.common import print_lines

WORKERS = 2


def bare_loop(config: dict[str, Any]) -> None:
    """A training loop that trains nothing: its first line's time, one report, the report's time.

    With ``train_steps`` > 0 it first trains that many steps (ResNet-18, DDP, random 28x28 digits,
    batch 64 per worker) and records their seconds: what a setting costs while training runs.
    """
    first_line = time.time()
    import ray.train

    rank = ray.train.get_context().get_world_rank()
    marks = {"first_line": first_line}
    steps = int(config.get("train_steps", 0))
    if steps:
        marks.update(train_steps(steps))
    before = time.time()
    ray.train.report({"rank": rank})
    marks.update(before_report=before, after_report=time.time())
    Path(config["marks_dir"], f"rank-{rank}.json").write_text(json.dumps(marks))


def train_steps(steps: int, batch_size: int = 64) -> dict[str, float]:
    """``steps`` DDP training steps of the course's ResNet-18 on random digits; their start and end."""
    import ray.train.torch
    import torch

    from course_utils.core.model import build_resnet18

    torch.manual_seed(0)
    model = ray.train.torch.prepare_model(build_resnet18())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    device = ray.train.torch.get_device()
    images = torch.randn(batch_size, 1, 28, 28, device=device)
    labels = torch.randint(0, 10, (batch_size,), device=device)
    loss_fn = torch.nn.CrossEntropyLoss()
    optimizer.zero_grad()
    loss_fn(model(images), labels).backward()  # a first step outside the timing: lazy set-up
    optimizer.step()
    started = time.time()
    for _ in range(steps):
        optimizer.zero_grad()
        loss_fn(model(images), labels).backward()
        optimizer.step()
    return {"train_start": started, "train_end": time.time()}


def _floor_actor_class() -> Any:
    import ray

    @ray.remote(num_cpus=1)
    class FloorWorker:
        """What a training worker needs at the least: a process, then torch and Ray Train's torch."""

        def __init__(self) -> None:
            self.started = time.time()
            import ray.train.torch  # noqa: F401
            import torch  # noqa: F401

            self.imported = time.time()

        def marks(self) -> tuple[float, float]:
            return self.started, self.imported

    return FloorWorker


def floor_once() -> dict[str, float]:
    """Two plain actors up and importing torch + ray.train.torch, in parallel: seconds."""
    import ray

    floor_cls = _floor_actor_class()
    asked = time.time()
    actors = [floor_cls.remote() for _ in range(WORKERS)]
    marks = ray.get([a.marks.remote() for a in actors])
    done = time.time()
    for actor in actors:
        ray.kill(actor)
    return {
        "floor: actor processes up": max(m[0] for m in marks) - asked,
        "floor: import torch, ray.train.torch": max(m[1] - m[0] for m in marks),
        "floor: total": done - asked,
    }


def _events(task: Any) -> dict[str, float]:
    """A task's state changes as {state: seconds since the epoch} (first time each state was entered)."""
    out: dict[str, float] = {}
    for event in task.events or []:
        out.setdefault(event["state"], event["created_ms"] / 1000)
    return out


def tasks_since(
    job_id: str, since: float, want: Callable[[list[Any]], bool], wait_s: float = 15.0
) -> list[Any]:
    """This job's tasks created after ``since``, once ``want`` is satisfied (task events arrive ≈ 1 s late)."""
    from ray.util.state import list_tasks

    deadline = time.monotonic() + wait_s
    while True:
        tasks = [
            t
            for t in list_tasks(
                filters=[("job_id", "=", job_id)], detail=True, limit=10_000, raise_on_missing_output=False
            )
            if (t.creation_time_ms or 0) / 1000 >= since - 0.5
        ]
        if want(tasks) or time.monotonic() > deadline:
            return tasks
        time.sleep(0.5)


def _placement_group_s(since: float) -> float | None:
    """End-to-end creation latency of the placement group made after ``since`` (Ray's own figure)."""
    from ray.util.state import list_placement_groups

    for group in list_placement_groups(detail=True, raise_on_missing_output=False):
        stats = group.stats or {}
        received = float(stats.get("creation_request_received_ns") or 0)  # int64 fields come as text
        latency = stats.get("end_to_end_creation_latency_us")  # the name Ray 2.60's state API gives
        if received / 1e9 >= since - 0.5 and latency is not None:
            return float(latency) / 1e6
    return None


def created(tasks: list[Any], class_name: str) -> list[Any]:
    """The actor-creation tasks of ``class_name`` (Ray names them ``<Class>.__init__``)."""
    return [
        t
        for t in tasks
        if t.type == "ACTOR_CREATION_TASK" and class_name in t.func_or_class_name.split(".")[0]
    ]


def creation_spans(tasks: list[Any], class_name: str) -> tuple[float, float, float]:
    """(first asked, last running, last finished): wall-clock seconds of the actors of ``class_name``
    these tasks created. Running is the actor's process up with its class loaded; finished, its
    ``__init__`` done."""
    events = [(t, _events(t)) for t in created(tasks, class_name)]
    if not events:
        raise LookupError(f"Ray's state API lists no {class_name} actor created in this window.")
    return (
        min(t.creation_time_ms for t, _ in events) / 1000,
        max(e["RUNNING"] for _, e in events),
        max(e["FINISHED"] for _, e in events),
    )


def fit_timeline(
    called: float, returned: float, marks: list[dict[str, float]], tasks: list[Any]
) -> dict[str, float]:
    """A bare fit's seconds, part by part, from the driver's clock, the loop's and Ray's task events.

    Ray's timestamps and the loop's are wall-clock times on this machine, so they line up.
    """
    worker_ids = {t.actor_id for t in created(tasks, "RayTrainWorker")}
    calls = [t for t in tasks if t.type == "ACTOR_TASK" and t.actor_id in worker_ids]
    controller_asked, controller_running, controller_ready = creation_spans(tasks, "TrainController")
    workers_asked, workers_running, workers_ready = creation_spans(tasks, "RayTrainWorker")
    first_line = max(m["first_line"] for m in marks)
    after_report = max(m["after_report"] for m in marks)
    rows: dict[str, float] = {}
    rows["driver: fit() to controller requested"] = controller_asked - called
    rows["controller: process up"] = controller_running - controller_asked
    rows["controller: __init__ (imports, callbacks)"] = controller_ready - controller_running
    rows["controller: run start, placement group, sync actor"] = workers_asked - controller_ready
    rows["workers: processes up"] = workers_running - workers_asked
    rows["workers: __init__"] = workers_ready - workers_running
    edge = workers_ready
    # Then the controller's calls on the workers, in the order they started (train context, the
    # torch process group, the train function's launch...): each from the previous edge to its end.
    by_name: dict[str, list[Any]] = {}
    for call in calls:
        if call.creation_time_ms / 1000 < first_line:
            by_name.setdefault(call.func_or_class_name, []).append(call)
    for name, group in sorted(by_name.items(), key=lambda kv: min(t.creation_time_ms for t in kv[1])):
        ends = [(t.end_time_ms or t.creation_time_ms) / 1000 for t in group]
        if name.endswith("run_train_fn"):
            continue  # it returns at once: the loop runs on a thread it starts
        end = min(max(ends), first_line)
        rows[f"workers: {name.split('.')[-1]} ({len(group)} calls)"] = max(0.0, end - edge)
        edge = max(edge, end)
    rows["workers: to the loop's first line"] = first_line - edge
    before_report = max(m.get("before_report", first_line) for m in marks)
    if before_report > first_line:
        rows["loop: before its report (the training steps, if any)"] = before_report - first_line
    if all("train_end" in m for m in marks):
        rows["(of which: the timed training steps, slowest rank)"] = max(
            m["train_end"] - m["train_start"] for m in marks
        )
    rows["loop: its one report"] = after_report - before_report
    rows["after the last report until fit() returns"] = returned - after_report
    rows["fit: total"] = returned - called
    return rows


def bare_fit_once(storage_dir: str, name: str, train_steps: int = 0) -> dict[str, float]:
    """One bare fit with Ray Train's public API only; its timeline (``train_steps``: see ``bare_loop``)."""
    import ray
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    marks_dir = tempfile.mkdtemp(dir=storage_dir)
    trainer = TorchTrainer(
        bare_loop,
        train_loop_config={"marks_dir": marks_dir, "train_steps": train_steps},
        scaling_config=ScalingConfig(num_workers=WORKERS),
        run_config=RunConfig(name=name, storage_path=storage_dir),
    )
    called = time.time()
    trainer.fit()
    returned = time.time()
    marks = [json.loads(p.read_text()) for p in Path(marks_dir).glob("rank-*.json")]
    job_id = ray.get_runtime_context().get_job_id()

    def complete(tasks: list[Any]) -> bool:
        actors = created(tasks, "TrainController") + created(tasks, "RayTrainWorker")
        calls = [t for t in tasks if t.func_or_class_name.endswith("run_train_fn")]
        return (
            len(actors) == WORKERS + 1
            and all("FINISHED" in _events(t) for t in actors)
            and len(calls) == WORKERS
        )

    tasks = tasks_since(job_id, called, complete)
    rows = fit_timeline(called, returned, marks, tasks)
    group_s = _placement_group_s(called)
    if group_s is not None:
        rows["(of which: placement group creation, Ray's figure)"] = group_s
    return rows


def course_fit_once(name: str) -> dict[str, float]:
    """The bare loop through the course's own per-fit work, as lesson 02 runs a fit."""
    from course_utils.core import storage, training
    from course_utils.core.progress import fit_progress

    storage.resolve().reset_run(name)
    with tempfile.TemporaryDirectory() as marks_dir:
        started = time.time()
        trainer = training.make_trainer(
            name,
            num_workers=WORKERS,
            store=resolve_storage(),
            train_loop=bare_loop,
            score_attribute=None,
            marks_dir=marks_dir,
        )
        built = time.time()
        with fit_progress(trainer, total=1, desc=name, utilization=True):
            trainer.fit()
        returned = time.time()
    storage.resolve().reset_run(name)
    return {
        "course: make_trainer (fit check, run check, storage)": built - started,
        "course: fit with ReportLog, progress bar, metrics sampling": returned - built,
    }


def _median_rows(rounds: list[dict[str, float]]) -> dict[str, float]:
    keys: list[str] = []
    for r in rounds:
        keys += [k for k in r if k not in keys]
    return {k: statistics.median(r[k] for r in rounds if k in r) for k in keys}


def print_table(title: str, rows: dict[str, float]) -> None:
    """One table of seconds, a row per part, aligned."""
    width = max(len(k) for k in rows)
    print(f"\n{title}")
    for key, value in rows.items():
        print(f"  {key:<{width}}  {value:6.2f} s")


def parse_tries(items: Sequence[str]) -> dict[str, str]:
    """``["A=1", "B=x"]`` -> ``{"A": "1", "B": "x"}``; a malformed item fails in plain words."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"--try takes KEY=VALUE, got {item!r}")
        out[key] = value
    return out


def _describe(env: dict[str, str]) -> str:
    return " ".join(f"{k}={v}" for k, v in env.items())


def print_comparison(title: str, before: dict[str, float], after: dict[str, float]) -> None:
    """Each part's seconds as configured and with the trial setting, and the difference."""
    keys = [k for k in before if k in after]
    width = max(len(k) for k in keys)
    print(f"\n{title}")
    for key in keys:
        print(
            f"  {key:<{width}}  {before[key]:6.2f} s -> {after[key]:6.2f} s  ({after[key] - before[key]:+.2f} s)"
        )


def main(argv: Sequence[str] | None = None) -> float:
    """A bare 2-worker fit timed part by part, the floor beside it, then the course's own per-fit work."""
    parser = argparse.ArgumentParser(
        prog="python -m maintainer_tools.bench startup", description=(main.__doc__ or "").split("\n")[0]
    )
    parser.add_argument("--rounds", type=int, default=3, help="fits (and floors) to take the median of")
    parser.add_argument(
        "--try",
        dest="tries",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="also time a bare fit with this environment variable set (Ray Train reads RAY_TRAIN_* at fit()), "
        "alternating with the fit as configured, and print both side by side; repeatable",
    )
    parser.add_argument(
        "--train-steps",
        type=int,
        default=0,
        help="the bare loop first trains this many DDP steps (ResNet-18, random digits), timed as their own row: "
        "what a --try setting costs while training runs",
    )
    args = parser.parse_args(argv)
    trial = parse_tries(args.tries)

    import ray

    from course_utils.core import session

    session.start_ray(verbose=False, log_to_driver=False)
    print(f"ray: {ray.__version__}\nworkers: {WORKERS}\nrounds: {args.rounds}", flush=True)
    floors, fits, course, tried = [], [], [], []
    with tempfile.TemporaryDirectory() as storage_dir:
        for i in range(args.rounds):
            floors.append(floor_once())
            fits.append(bare_fit_once(storage_dir, f"bench-startup-{i}", args.train_steps))
            line = (
                f"round {i + 1}: fit {fits[-1]['fit: total']:.2f} s, floor {floors[-1]['floor: total']:.2f} s"
            )
            if trial:
                with temporary_env(trial):
                    tried.append(bare_fit_once(storage_dir, f"bench-startup-try-{i}", args.train_steps))
                line += f", fit with {_describe(trial)} {tried[-1]['fit: total']:.2f} s"
            print(line, flush=True)
    for _ in range(args.rounds):
        course.append(course_fit_once("bench-startup-course"))
    fit_rows, floor_rows, course_rows = _median_rows(fits), _median_rows(floors), _median_rows(course)
    print_table(f"a bare fit, part by part (median of {args.rounds})", fit_rows)
    print_table(f"the floor: {WORKERS} plain actors importing torch (median of {args.rounds})", floor_rows)
    print_table(f"the course's own per-fit work, the same bare loop (median of {args.rounds})", course_rows)
    if trial:
        print_comparison(
            f"a bare fit as configured -> with {_describe(trial)} (median of {args.rounds})",
            fit_rows,
            _median_rows(tried),
        )
    # --train-steps: the fit's start-up and end, without the loop's training (the ratio compares start-ups)
    fit_s = fit_rows["fit: total"] - fit_rows.get("loop: before its report (the training steps, if any)", 0.0)
    floor_s = floor_rows["floor: total"]
    ratio = fit_s / floor_s
    print()
    print_lines(
        {
            "course_fit_seconds": course_rows["course: make_trainer (fit check, run check, storage)"]
            + course_rows["course: fit with ReportLog, progress bar, metrics sampling"],
            "fit_seconds": fit_s,
            "floor_seconds": floor_s,
            "fit_vs_floor_ratio": round(ratio, 2),
        }
    )
    return ratio
