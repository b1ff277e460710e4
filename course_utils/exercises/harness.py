"""Run a learner's per-worker training function for real, and record what each rank did.

For lessons 02 and 04's checks: a short 2-worker fit runs the learner's function under a recorder
that notes, on every rank, ``ray.train.report`` (with or without a checkpoint), ``set_epoch``, the
batch sizes trained on and optimizer steps, without changing what the function does; it can crash
one rank once (``crash_step``) to test resumption. The check then says in plain words what is wrong.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from course_utils.core import session, training
from course_utils.core.config import get_profile, temporary_env
from course_utils.internals import logs
from course_utils.lesson04.faults import InjectedFault

# The rank a crash_step crashes, and how long it waits after each report before going on, so that
# Ray Train has registered the checkpoint before the crash (its controller polls every 2 s).
CRASH_RANK = 1
SETTLE_S = 3.5
# Short collective timeouts, so a rank that skips ``report`` fails the check in seconds, not never.
COLLECTIVE_ENV = {"RAY_TRAIN_COLLECTIVE_WARN_INTERVAL_S": "5", "RAY_TRAIN_COLLECTIVE_TIMEOUT_S": "20"}


@dataclass
class FitRecord:
    """What happened in one checked fit: per-rank events, tagged with the attempt they ran in."""

    error: BaseException | None
    result: Any  # ray.train.Result, or None when the fit failed
    epochs: int
    global_batch: int
    num_workers: int
    events: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0  # how long fit() ran, start-up included

    def of(self, kind: str, rank: int | None = None, attempt: int | None = None) -> list[dict[str, Any]]:
        """The events of one kind, optionally of one rank and one attempt, in order."""
        return [
            e
            for e in self.events
            if e["kind"] == kind
            and (rank is None or e["rank"] == rank)
            and (attempt is None or e["attempt"] == attempt)
        ]

    @property
    def attempts(self) -> int:
        """How many times the worker group started the function (1 + restarts)."""
        return max((e["attempt"] for e in self.of("start")), default=0)

    def reports(self, rank: int, attempt: int | None = None) -> list[dict[str, Any]]:
        """``{"metrics": ..., "checkpoint": bool}`` of each ``ray.train.report`` call of ``rank``."""
        return self.of("report", rank, attempt)

    def set_epochs(self, rank: int, attempt: int | None = None) -> list[int]:
        """The epochs ``rank`` passed to ``DistributedSampler.set_epoch``, in order."""
        return [e["epoch"] for e in self.of("set_epoch", rank, attempt)]

    def batch_sizes(self, rank: int) -> set[int]:
        """Sizes of the batches ``rank``'s model trained on."""
        return {size for e in self.of("batches", rank) for size in e["sizes"]}

    def losses(self, rank: int = 0) -> list[float]:
        """``train_loss`` of each of ``rank``'s reports that carried one."""
        return [r["metrics"]["train_loss"] for r in self.reports(rank) if "train_loss" in r["metrics"]]


def _recorder_class():
    import ray

    @ray.remote(num_cpus=0)
    class Recorder:
        """Collects events from every rank; numbers each rank's starts (its attempt)."""

        def __init__(self) -> None:
            self.events: list[dict[str, Any]] = []
            self.starts: dict[int, int] = defaultdict(int)

        def start(self, rank: int) -> int:
            self.starts[rank] += 1
            self.events.append({"kind": "start", "rank": rank, "attempt": self.starts[rank]})
            return self.starts[rank]

        def add(self, events: list[dict[str, Any]]) -> None:
            self.events.extend(events)

        def all(self) -> list[dict[str, Any]]:
            return self.events

    return Recorder


@contextmanager
def _patched(target: Any, name: str, replacement: Any) -> Iterator[None]:
    original = getattr(target, name)
    setattr(target, name, replacement)
    try:
        yield
    finally:
        setattr(target, name, original)


def _recorded_loop(config: dict[str, Any]) -> None:
    """The per-worker function the checked fit runs: the learner's function under the recorder.

    The learner's function travels pickled and is unpickled here, after ``ray.train.report`` is
    wrapped, so a ``from ray.train import report`` in the learner's cell is watched too.
    """
    import cloudpickle
    import ray
    import ray.train
    import torch
    from torch.nn.modules.module import register_module_forward_pre_hook
    from torch.optim.optimizer import register_optimizer_step_post_hook
    from torch.utils.data import DistributedSampler

    settings = config.pop("_fitcheck")
    recorder = settings["recorder"]
    rank = ray.train.get_context().get_world_rank()
    attempt = ray.get(recorder.start.remote(rank))
    crashes_here = settings.get("crash_step") is not None and rank == CRASH_RANK and attempt == 1
    pending: list[dict[str, Any]] = []
    sizes: set[int] = set()
    steps = 0

    def event(kind: str, **values: Any) -> dict[str, Any]:
        return {"kind": kind, "rank": rank, "attempt": attempt, **values}

    def flush() -> None:
        if sizes:
            pending.append(event("batches", sizes=sorted(sizes)))
            sizes.clear()
        if pending:
            ray.get(recorder.add.remote(list(pending)))
            pending.clear()

    real_report = ray.train.report

    def report(metrics: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        checkpoint = kwargs.get("checkpoint", args[0] if args else None)
        plain = {k: v for k, v in dict(metrics).items() if isinstance(v, int | float | str | bool)}
        pending.append(event("report", metrics=plain, checkpoint=checkpoint is not None, steps=steps))
        flush()
        returned = real_report(metrics, *args, **kwargs)
        if crashes_here:
            # Ray Train registers a reported checkpoint when its controller next polls the workers
            # (every 2 s): a crash sooner than that loses it, and the restart would rightly start
            # from scratch. Waiting makes "resume from the last checkpoint" the certain outcome.
            time.sleep(SETTLE_S)
        return returned

    real_set_epoch = DistributedSampler.set_epoch

    def set_epoch(sampler: Any, epoch: int) -> None:
        pending.append(event("set_epoch", epoch=int(epoch)))
        real_set_epoch(sampler, epoch)

    def on_forward(module: torch.nn.Module, args: tuple) -> None:
        if module.training and type(module).__name__ == "ResNet" and args and hasattr(args[0], "shape"):
            sizes.add(int(args[0].shape[0]))

    def on_step(optimizer: Any, args: Any, kwargs: Any) -> None:
        nonlocal steps
        steps += 1
        if crashes_here and steps == settings["crash_step"]:
            print(f"[check] crashing rank {rank} at its step {steps}, once", flush=True)
            flush()
            raise InjectedFault(f"the check crashed rank {rank} at step {steps} on purpose")

    forward_hook = register_module_forward_pre_hook(on_forward)
    step_hook = register_optimizer_step_post_hook(on_step)
    try:
        with _patched(ray.train, "report", report), _patched(DistributedSampler, "set_epoch", set_epoch):
            learner_fn = cloudpickle.loads(settings["fn"])
            learner_fn(config)
    finally:
        forward_hook.remove()
        step_hook.remove()
        pending.append(event("end", steps=steps))
        flush()


def fit_learner_function(
    train_fn: Callable[[dict[str, Any]], None],
    name: str,
    *,
    train_size: int = 512,
    test_size: int = 256,
    epochs: int = 3,
    global_batch: int = 64,
    num_workers: int = 2,
    max_failures: int = 0,
    crash_step: int | None = None,
) -> FitRecord:
    """Fit ``train_fn`` on ``num_workers`` CPU workers with a small profile, as a fresh run ``name``
    in the learner's storage; a failed fit is recorded, not raised. ``crash_step`` makes rank 1 raise
    once at that optimizer step (use with ``max_failures=1``), after waiting ``SETTLE_S`` after each
    report so the crash never outruns a checkpoint."""
    import cloudpickle
    import ray
    from ray.train import CheckpointConfig, FailureConfig, LoggingConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    if not ray.is_initialized():
        raise RuntimeError("Ray is not running: run the lesson's setup cell (session.start_ray()) first.")
    profile = get_profile().with_(
        train_size=train_size, test_size=test_size, epochs=epochs, batch_size=global_batch
    )
    recorder = _recorder_class().remote()
    config = training.loop_config(profile)
    config["_fitcheck"] = {"recorder": recorder, "fn": cloudpickle.dumps(train_fn), "crash_step": crash_step}
    store = session.current().storage  # the learner's storage, as the lesson's own fits use it
    store.reset_run(name)
    storage_path, storage_filesystem = store.for_ray()
    trainer = TorchTrainer(
        _recorded_loop,
        train_loop_config=config,
        scaling_config=ScalingConfig(num_workers=num_workers, use_gpu=False),
        run_config=RunConfig(
            name=name,
            storage_path=storage_path,
            storage_filesystem=storage_filesystem,
            checkpoint_config=CheckpointConfig(num_to_keep=1),
            failure_config=FailureConfig(max_failures=max_failures),
            logging_config=LoggingConfig(log_level=logs.TRAIN_LOG_LEVEL),  # the check's words, not Ray's INFO
        ),
    )
    error, result = None, None
    started = time.perf_counter()
    with temporary_env(COLLECTIVE_ENV):  # read from the driver's environment when the fit starts
        try:
            result = trainer.fit()
        except Exception as exc:  # TrainingFailedError and friends: the check explains them
            error = exc
    events = ray.get(recorder.all.remote())
    ray.kill(recorder)
    seconds = time.perf_counter() - started
    return FitRecord(error, result, epochs, global_batch, num_workers, events, seconds)


def failure_summary(error: BaseException) -> str:
    """The learner's own exception from a failed fit, as one line (``Type: message``)."""
    worker_errors = getattr(error, "worker_failures", None) or {}
    for rank, exc in sorted(worker_errors.items()):
        lines = [line for line in str(exc).strip().splitlines() if line.strip()]
        return f"rank {rank}: {lines[-1].strip() if lines else type(exc).__name__}"
    lines = [line for line in str(error).strip().splitlines() if line.strip()]
    return f"{type(error).__name__}: {lines[0] if lines else ''}"
