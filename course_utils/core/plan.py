"""What each lesson runs, decided in one place from the profile and the GPUs this machine has.

A lesson asks ``plan.for_lesson("04", data.ensure_mnist(verbose=False))`` and gets every kind of
fit it makes with real numbers (workers, CPU or GPU, epochs, sizes counted on disk, a global batch
that splits evenly, steps per epoch) and one line saying why it runs that way here.

Why: the ``full`` profile means "one worker per GPU, all of MNIST", which does not suit lesson 04's
failure demos: they need two ranks, and a 1-GPU runner has one. So they run on two CPU workers
unless two or more GPUs are visible. The elastic demo always uses CPU workers: its second
"machine" runs here and would see the same GPUs, and two ranks on one GPU is an error for NCCL.
Pure functions: nothing here starts Ray or reads data.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from course_utils.core import config, device
from course_utils.core.config import Profile

LESSONS = ("01", "02", "03", "04")

# Lesson 04's failure demos: room for a crash inside an epoch (section 03 crashes at step 2)
# and for a mid-epoch checkpoint before the SIGKILL (section 12 checkpoints
# every 4 steps and kills at step steps - 3, one step past the checkpoint at step 4). They are
# about failures, not accuracy, and every step costs time (an all-reduce of 11 M parameters on
# CPU), so an epoch has no more steps than the demos need.
FAULT_DEMO_STEPS = 8
FAULT_DEMO_EPOCHS = 3  # crashes in epochs 1 and 2, a manual restore for the rest
ELASTIC_DEMO_EPOCHS = 3  # one epoch on 1 worker, one on 2 once a node joined, one on 1 once it left
# Its epochs are half the failure demos' (4 steps): three restarts already cost it most of its time.
ELASTIC_DEMO_TRAIN_SIZE = 512
# On CPU workers: 2 workers, 8 steps of a global batch of 128 per epoch, a 500-digit test set.
CPU_DEMO = {"num_workers": 2, "batch_size": 128, "train_size": 1024, "test_size": 500}


def per_worker_batch(global_batch: int, world_size: int) -> int:
    """Split the global batch evenly across workers, or say clearly why it cannot be."""
    if world_size < 1 or global_batch < 1:
        raise ValueError(
            f"Need a positive batch and worker count, got batch {global_batch}, {world_size} workers."
        )
    if global_batch % world_size:
        lower = global_batch - global_batch % world_size
        raise ValueError(
            f"Global batch {global_batch} does not split evenly across {world_size} workers. "
            f"Use a multiple of {world_size}, e.g. {lower} or {lower + world_size}."
        )
    return global_batch // world_size


@dataclass(frozen=True)
class Run:
    """One kind of fit a lesson makes: a ``Profile`` with real sizes, and why it runs that way."""

    name: str
    profile: Profile
    why: str
    what: str = ""  # which sections, for the printed plan
    trains: bool = True  # False: the run's loop trains nothing (sizes do not matter)

    @property
    def steps_per_epoch(self) -> int:
        """Batches per epoch on each rank (a ``DistributedSampler`` shard, the per-worker batch)."""
        return steps_per_epoch(self.profile.train_size, self.profile.batch_size, self.profile.num_workers)

    @property
    def device(self) -> str:
        return "GPU" if self.profile.use_gpu else "CPU"

    def describe(self) -> str:
        p = self.profile
        sizes = (
            f", {p.epochs} epoch(s) of {p.train_size:,} digits, global batch {p.batch_size} "
            f"({self.steps_per_epoch} steps/epoch)"
            if self.trains
            else ""
        )
        label = f"{self.name} ({self.what})" if self.what else self.name
        return f"{label}: {p.num_workers} {self.device} worker(s){sizes}; {self.why}"


@dataclass(frozen=True)
class LessonPlan:
    """Every run of one lesson, for one profile and GPU count."""

    lesson: str
    profile: Profile  # the active profile as config gives it (train_size None = all digits)
    gpus: int
    runs: dict[str, Run] = field(default_factory=dict)

    def __getitem__(self, name: str) -> Run:
        return self.runs[name]

    def describe(self) -> str:
        head = f"plan for lesson {self.lesson}: profile {self.profile.name}, {self.gpus} GPU(s) visible"
        return "\n".join([head, *(f"  {run.describe()}" for run in self.runs.values())])


def steps_per_epoch(train_size: int, batch_size: int, num_workers: int = 1) -> int:
    """Batches per epoch on each of ``num_workers`` ranks: the sampler pads every shard to
    ``ceil(train_size / num_workers)`` samples, each rank takes ``batch_size / num_workers``."""
    if train_size is None:
        raise ValueError("train_size is None: take the real count from the data (plan.for_lesson does).")
    per_rank = math.ceil(train_size / num_workers)
    return math.ceil(per_rank / (batch_size // num_workers))


def _batch_for(batch_size: int, num_workers: int) -> int:
    """The largest global batch <= ``batch_size`` that splits evenly across ``num_workers``."""
    return max(num_workers, batch_size - batch_size % num_workers)


def _sizes(mnist: Any) -> tuple[int, int]:
    """(train, test) digit counts on disk: an ``MnistInfo`` or a (train, test) pair."""
    if hasattr(mnist, "train_size"):
        return int(mnist.train_size), int(mnist.test_size)
    train, test = mnist
    return int(train), int(test)


def _real(profile: Profile, train: int, test: int) -> Profile:
    """``profile`` with its sizes as counts (``None`` = every digit on disk)."""
    return profile.with_(
        train_size=min(profile.train_size or train, train),
        test_size=min(profile.test_size or test, test),
        batch_size=_batch_for(profile.batch_size, profile.num_workers),
    )


def for_lesson(lesson: str, mnist: Any, profile: str | None = None, gpus: int | None = None) -> LessonPlan:
    """The plan for ``lesson`` ("01".."04"). ``mnist``: ``data.ensure_mnist()``'s result (or a
    (train, test) pair of sizes); ``profile``: a name (default ``COURSE_PROFILE``); ``gpus``:
    default the GPUs PyTorch sees here (``course_utils.core.device.gpu_count``)."""
    if lesson not in LESSONS:
        raise ValueError(f"No plan for lesson {lesson!r}; lessons with a plan: {', '.join(LESSONS)}.")
    gpus = device.gpu_count() if gpus is None else int(gpus)
    active = config.get_profile(profile, gpus=gpus)
    train, test = _sizes(mnist)
    real = _real(active, train, test)
    plan = LessonPlan(lesson=lesson, profile=active, gpus=gpus)
    if lesson == "01":
        # One process on one device (device.get_device: a GPU whenever one is visible).
        one = real.with_(num_workers=1, use_gpu=gpus > 0, batch_size=active.batch_size)
        where = "the one GPU PyTorch uses" if gpus else "the CPU (no GPU visible)"
        plan.runs["baseline"] = Run("baseline", one, f"plain PyTorch in one process on {where}")
        plan.runs["ray_task"] = Run("ray_task", one.with_(epochs=1), "the same function as one Ray task")
    elif lesson in ("02", "03"):
        why = (
            f"one worker per GPU ({gpus})"
            if real.use_gpu
            else f"{real.num_workers} CPU worker(s), the {active.name} profile"
        )
        name = "fit" if lesson == "02" else "fit_ray_data"
        plan.runs[name] = Run(name, real, why)
        if lesson == "02":
            plan.runs["eval_split"] = _eval_split(real)
    else:
        plan.runs.update(_lesson04(active, real, gpus, train, test))
    return plan


def _eval_split(fit: Profile) -> Run:
    """Lesson 02's "evaluate once, not once per worker": the test set split over the fit's ranks.

    With one worker its share *is* the whole set, so the lesson shows the split for 2 ranks, what a
    second worker would change, and says so (it runs on the driver: no second device needed).
    """
    what = "10: evaluate once, not once per worker"
    if fit.num_workers >= 2:
        why = f"the fit's {fit.num_workers} ranks each score 1/{fit.num_workers} of the test set"
        return Run("eval_split", fit, why, what, trains=False)
    why = (
        "the fit has 1 worker, whose share is the whole test set: shown for 2 ranks, "
        "what a second worker would change"
    )
    return Run("eval_split", fit.with_(num_workers=2), why, what, trains=False)


def _lesson04(active: Profile, real: Profile, gpus: int, train: int, test: int) -> dict[str, Run]:
    cpu = active.with_(
        num_workers=CPU_DEMO["num_workers"],
        use_gpu=False,
        epochs=FAULT_DEMO_EPOCHS,
        train_size=min(CPU_DEMO["train_size"], train),
        test_size=min(CPU_DEMO["test_size"], test),
        batch_size=CPU_DEMO["batch_size"],
    )
    what = "03-06: rank-1 crashes, retries, restore, retention; 12: SIGKILL of rank 1"
    if active.use_gpu and gpus >= 2:
        batch = real.batch_size  # already a multiple of the GPU count
        shape = real.with_(epochs=FAULT_DEMO_EPOCHS, train_size=min(FAULT_DEMO_STEPS * batch, train))
        faults = Run("faults", shape, f"one worker per GPU ({gpus}), so rank 1 is a GPU worker", what)
    elif active.use_gpu:
        why = "1 GPU is one rank and these demos need two, so they run on CPU (they are about failures, not speed)"
        faults = Run("faults", cpu, why, what)
    elif active.num_workers < 2:
        faults = Run(
            "faults", cpu, f"the {active.name} profile gives 1 worker here; these demos need two", what
        )
    else:
        faults = Run("faults", cpu, f"the {active.name} profile's CPU workers", what)
    elastic_why = "one worker per node" + (
        "; on CPU because the extra node would share this machine's GPUs, and two ranks on one GPU "
        "is an error for NCCL"
        if gpus
        else ""
    )
    return {
        "faults": faults,
        # Epoch 0 on 1 worker, a node joins: epoch 1 on 2; it leaves: epoch 2 on the 1 left.
        "elastic": Run(
            "elastic",
            cpu.with_(epochs=ELASTIC_DEMO_EPOCHS, train_size=ELASTIC_DEMO_TRAIN_SIZE),
            elastic_why,
            "13: a node joins, then leaves, an elastic (1, 2) run",
        ),
        "hang": Run(
            "hang",
            cpu.with_(epochs=1),
            "one rank skips report, so it needs a second",
            "14: a rank skips report",
            trains=False,
        ),
    }
