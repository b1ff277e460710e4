"""What the tiers share about a lesson's run besides running it (``tiers.run_lesson``): the paths a learner
takes, which lessons a tier runs at each push, and what in an executed lesson a learner would read as
"it broke" (red lines, tracebacks, unfinished progress bars) or as unexplained red output."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from maintainer_tools.docsite import WIDGET_STATE, WIDGET_VIEW
from maintainer_tools.run_course import lessons

# The paths a learner takes (CONTRIBUTING.md, "Tests"); tests mark themselves with
# @pytest.mark.path(NAME) and the end of the test output sums each path up (conftest.py).
LAPTOP = "laptop: local Ray, local storage, lessons as shipped"
ANSWERED = "exercises answered (solutions pasted, same kernel)"
CLUSTER = "cluster someone else started: `ray start --head` + RAY_ADDRESS"
S3 = "S3-compatible storage: COURSE_STORAGE=s3://bucket/prefix (moto server on loopback)"
SHARED = "shared storage and cluster: only the learner's own things are removed"
GPU = "GPU runner, 1 or N GPUs: the lesson plans for 0, 1 and 4 GPUs, gpu.yml's probe"
GPU_SHAPED = "GPU-shaped: a Ray cluster that declares 1 or 2 GPUs on this CPU machine (lessons 05-06, pools, preflights)"
BROWSER = "JupyterLab in a browser: ./build.sh lab headless + Chromium (Playwright), lessons from the UI"
HOSTS = "real hosts: a head and two worker hosts sharing only the network (namespaces, private disks), S3 on the head"
DOCS_SITE = "the documentation site: ./build.sh docs, every page read in Chromium"
COLAB = "Colab-shaped: a lesson alone in an empty folder, a fresh venv with Colab's stack, its install cell"

T = TypeVar("T")

LESSONS = lessons()  # notebooks/NN_*.ipynb in order, as ./build.sh course runs them


def every_lesson(variable: str) -> bool:
    """True when ``variable`` is ``all``: a tier that runs some lessons at each push runs all six."""
    return os.environ.get(variable) == "all"


def at_each_push(variable: str, every: Sequence[T], keep: Callable[[T], bool]) -> list[T]:
    """What a costly test runs: the items of ``every`` that ``keep`` picks at each push, or all of them
    when ``variable`` is ``all`` (a weekly run, or a maintainer asking for the whole set)."""
    return [item for item in every if every_lesson(variable) or keep(item)]


def tier_lessons(variable: str, numbers: tuple[str, ...]) -> list[Path]:
    """The lessons a tier runs: those numbered in ``numbers``, or all six when ``variable`` is ``all``
    (the weekly runs set it)."""
    return at_each_push(variable, LESSONS, lambda p: p.name[:2] in numbers)


# ------------------------------------------------------------ what a learner reads as "it broke"

TRACEBACK = "Traceback (most recent call last)"
# What a kernel that ran Ray may print to its terminal (not its cells) when it is stopped or restarted: absl's
# C++ stack on SIGTERM ("*** SIGTERM received ... PC: @ ..."), or Ray's C++ log lines ("core_worker.cc:123").
RAY_ON_STOP = re.compile(r"SIGTERM received|PC: @|^\s*@\s+0x[0-9a-f]+|\b\w+\.cc:\d+")
REPORT_DUMP = "TrainingReport("  # Ray Train's INFO line for every report of every rank
# Cells that show a failure on purpose, by lesson and the cell's first line: a traceback there
# is the lesson (lesson 04 injects faults; Ray Train logs the failing rank's traceback).
FAILURES_ON_PURPOSE: dict[str, tuple[str, ...]] = {
    "04_fault_tolerance.ipynb": (
        "# 03. Automatic retries: a rank crashes mid-epoch",
        "# 12. A worker killed from outside, resumed at the exact batch",
        "# 13. Elastic training: the part you would write on a real cluster",
        "# 14. Troubleshooting: a hang when one rank skips report",
        "# 11. Exercise 4: count steps across a restart",  # the check crashes the learner's loop once
    ),
}


# Cells whose stderr the lesson announces in the markdown before them, by lesson and first line, with
# the phrase every such line carries: lesson 03's split-hang demo (Going further, section 17) waits for
# Ray Data's warning about its waiting reader, which Ray also sends to the driver's output.
# Lesson 05: Ray's core worker warns once per process, on the driver's stderr, when a pool actor gets its
# constructor arguments (the model's bytes) through the object store while Ray Data lets it restart; it
# reaches the notebook on some runs (four learners at once) and only the kernel's terminal on others.
POOL_ARGS_WARNING = "has constructor arguments in the object store and max_restarts > 0"
ANNOUNCED_STDERR: dict[str, dict[str, str]] = {
    "03_ray_data_integration.ipynb": {
        "# 17. Going further: the warning, the stacks and a bounded wait": "blocked waiting on other clients"
    },
    "05_inference.ipynb": {
        "# 07. Batch inference with Ray Data": POOL_ARGS_WARNING,
        "# 12. Going further: per-image calls vs batch inference": POOL_ARGS_WARNING,
        "# 11. Exercise 2: a batch predictor that says how sure it is": POOL_ARGS_WARNING,
    },
}


# On a cluster shared by several learners, the GCS sends its own error lines to every driver connected
# (Ray's log monitor publishes gcs_server.err). One of them comes from a race in Ray, not from any lesson:
# the GCS asked to kill an actor whose process had already exited (a pool torn down, a killed model
# actor), and says so for whichever learner's actor it was. Seen 2026-11-26 in all four notebooks of a
# workshop at once, and on the hosts tier's three machines; docs/troubleshooting.md explains it. Only the
# paths on a cluster the driver joined (the workshop, the hosts tier) accept it, and only it.
#
# Abseil's lock trace, which a Ray worker sometimes prints, never reaches a notebook: start_ray drops it from
# the driver's output (rayinternals.skip_abseil_mutex_trace), so here it is a finding like any other line.
SHARED_CLUSTER_LINES = (
    re.compile(
        r".*\(gcs_server\) gcs_actor_scheduler\.cc:\d+: Failed to kill actor \w+, return status: Invalid: "
        r"KillActor RPC failed for actor \w+: RpcError: RPC error: Socket closed.*"
    ),
)


def alarming_output(nb, name: str, *, shared_cluster: bool = False) -> list[str]:
    """Output of a lesson that ran fine which a learner would read as "it broke", one line each.

    Any stderr line (red in a notebook) in a cell not listed in ``FAILURES_ON_PURPOSE[name]``, except
    the announced ones (``ANNOUNCED_STDERR``) and, with ``shared_cluster``, the GCS's lines every driver
    of a shared cluster receives (``SHARED_CLUSTER_LINES``); a traceback in such a cell; and any
    ``TrainingReport(`` dump (Ray Train's INFO chatter, kept in the log folder by
    ``RunConfig(logging_config=...)``). A cell that raised is not counted here: the run already failed on it.
    """
    allowed = FAILURES_ON_PURPOSE.get(name, ())
    announced = ANNOUNCED_STDERR.get(name, {})
    shared = SHARED_CLUSTER_LINES if shared_cluster else ()
    found = []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        first = cell.source.splitlines()[0] if cell.source else ""
        text = "".join(out.get("text", "") for out in cell.get("outputs", []) if out.output_type == "stream")
        stderr = [
            line
            for out in cell.get("outputs", [])
            if out.output_type == "stream" and out.get("name") == "stderr"
            for line in out.get("text", "").splitlines()
            if line.strip()
        ]
        if first in announced:
            stderr = [line for line in stderr if announced[first] not in line]
        stderr = [line for line in stderr if not any(p.fullmatch(line) for p in shared)]
        if stderr and first not in allowed:
            found.append(
                f"cell {index} ({first!r}): {len(stderr)} line(s) on stderr, the first: {stderr[0][:200]!r}"
            )
        if TRACEBACK in text and first not in allowed:
            found.append(f"cell {index} ({first!r}): a traceback ending {_exception_line(text)!r}")
        if REPORT_DUMP in text:
            found.append(f"cell {index} ({first!r}): {text.count(REPORT_DUMP)} {REPORT_DUMP!r} dump(s)")
    return found


def _bar_value(state: dict, model_id: str) -> int | None:
    """The value of the progress bar inside tqdm's widget ``model_id``, from the notebook's saved widget
    state (what JupyterLab showed last), or None when it was not saved."""
    children = state.get(model_id, {}).get("state", {}).get("children", [])
    for child in children:
        model = state.get(child.removeprefix("IPY_MODEL_"), {})
        if model.get("model_name", "").endswith("ProgressModel"):
            return int(model.get("state", {}).get("value", 0))
    return None


def progress_text_not_final(nb) -> list[str]:
    """Progress bars whose saved text form (what GitHub, nbviewer and nbconvert show) is not where the
    bar ended (``course_utils.bars``): a widget output whose text reads another count than the widget's
    last state, or, where no widget state was saved, fewer steps than its total. A bar of a run that
    failed on purpose ends short, and says so."""
    state = nb.metadata.get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    found = []
    for index, cell in enumerate(nb.cells):
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            if WIDGET_VIEW not in data:
                continue
            text = data.get("text/plain", "")
            done = re.search(r"\|\s*(\d+)/(\d+)\s*\[", text)
            if not done:
                continue
            final = _bar_value(state, data[WIDGET_VIEW].get("model_id", ""))
            if (int(done[1]) != final) if final is not None else (int(done[1]) < int(done[2])):
                found.append(f"cell {index}: a progress bar saved as {text.strip()[:100]!r}")
    return found


# ------------------------------------------------ red lines of the cells that fail on purpose


@dataclass(frozen=True)
class RedLine:
    """One kind of red line a failure demo prints: what it is, the lines it covers, the words that explain it.

    ``patterns`` match a whole stderr line once Ray's colour codes, its ``(Name pid=..)`` prefix, the
    ``[repeated Nx across cluster]`` mark and its log-deduplication notice are taken off. ``explained_by``
    (a regex, case-insensitive) must be found in the markdown cell right after the cell that printed it;
    ``once`` kinds (Ray prints them once a session, under whichever cell comes first) may be explained
    after an earlier failure cell instead.
    """

    name: str
    patterns: tuple[str, ...]
    explained_by: str
    once: bool = False

    def matches(self, line: str) -> bool:
        return any(re.fullmatch(p, line) for p in self.patterns)


# The markdown right before a failure cell says what is coming, in these words (bold in the lessons).
ANNOUNCEMENT = re.compile(r"Red output ahead\b[^\n]*expected", re.IGNORECASE)
_COLOUR = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_RAY_PREFIX = re.compile(r"^\((?:[\w.]+ )?pid=[^()]*\) ?|^\((?:raylet|gcs_server|autoscaler)\b[^()]*\) ?")
_REPEATED = re.compile(r"\s*\[repeated \d+x across cluster\]")
_DEDUP_NOTICE = re.compile(r"\s*\(Ray deduplicates logs by default\. Set RAY_DEDUP_LOGS=0[^)]*\)\.?")

# The frames of any traceback: its first line, the indented frame and code lines (and the ``^^^`` marks,
# and the tab-indented details of an ActorDiedError), blank lines and the chaining sentences. The line
# that says what was raised is never one of these: each failure cell lists its own.
TRACEBACK_FRAMES = RedLine(
    "a traceback's frames",
    (
        r"\s*",
        r"Traceback \(most recent call last\):",
        r"\s+\S.*",
        r"The above exception was the direct cause of the following exception:",
        r"During handling of the above exception, another exception occurred:",
    ),
    explained_by=r"traceback",
)
DEDUP_NOTICE = RedLine(
    "Ray's log-deduplication notice, spliced into another line",
    (),  # found by _DEDUP_NOTICE, not by a whole line
    explained_by=r"RAY_DEDUP_LOGS",
    once=True,
)
RANK_ERROR = RedLine(
    "Ray Train's header over a rank's error",
    (r"Error in training function:",),
    explained_by=r"Error in training function|traceback",
)
INJECTED = RedLine(
    "the planted InjectedFault",
    (
        r"(?:course_utils\.lesson04\.faults\.)?InjectedFault: injected failure on rank \d+ at epoch \d+, step \d+",
    ),
    explained_by=r"InjectedFault",
)
CHECK_CRASH = RedLine(
    "the exercise check's own crash",
    (
        r"(?:course_utils\.lesson04\.faults\.)?InjectedFault: the check crashed rank \d+ at step \d+ on purpose",
    ),
    explained_by=r"InjectedFault",
)
GLOO_PEER = RedLine(
    "gloo: the surviving rank's collective lost its peer",
    (r"RuntimeError: \[[^\]]*gloo[^\]]*\] Connection (?:closed|reset) by peer .*",),
    explained_by=r"Connection closed by peer",
)
GRACEFUL_SHUTDOWN = RedLine(
    "the controller's failed graceful shutdown of the worker group",
    (r"Graceful shutdown of backend failed\. This is expected if one of the workers has crashed\.",),
    explained_by=r"Graceful shutdown",
)
ACTOR_DIED = RedLine(
    "ActorDiedError: a worker process is gone",
    (r"ray\.exceptions\.ActorDiedError: The actor died unexpectedly before finishing this task\.",),
    explained_by=r"ActorDiedError",
)
OOM_GUESS = RedLine(
    "Ray's guess that the OOM killer killed the worker (the lesson's SIGKILL did)",
    (
        r"The actor is dead because its worker process has died\. .*",
        r"A worker died or was killed while executing a task by an unexpected system error\..*",
    ),
    explained_by=r"OOM killer",
)
NODE_DIED = RedLine(
    "the worker's node left (the harness's SIGTERM)",
    (r"The actor died because its node has died\. Node Id: [0-9a-f]+",),
    explained_by=r"its node has died",
)
STARTUP_TIMEOUT = RedLine(
    "the worker group startup timeout (the controller tried 2 workers once more)",
    (
        r"(?:Error in control loop iteration: )?The worker group startup timed out after [\d.]+ seconds .*",
        r"ray\.train\.v2\._internal\.exceptions\.WorkerGroupStartupTimeoutError: The worker group startup .*",
    ),
    explained_by=r"WorkerGroupStartupTimeoutError",
)
BARRIER_WARNING = RedLine(
    "Ray's warning that a rank has not called report",
    (
        r"`ray\.train\.report` has not been called by all \d+ workers in the group\.",
        r"The workers have been waiting for [\d.]+ s for the following ranks to join the "
        r"`ray\.train\.report` call: \[[\d, ]+\]\.",
        r"Also ensure that workers are not hanging on other operations, causing them to miss this "
        r"synchronization barrier\.",
        r"You can set the RAY_TRAIN_COLLECTIVE_WARN_INTERVAL_S environment variable to change the "
        r"frequency of this warning \(current value: [\d.]+ s\)\.",
    ),
    explained_by=r"SynchronizationActor",
)
COLLECTIVE_TIMEOUT = RedLine(
    "the collective timeout that ended the hang",
    (
        r"ray\.exceptions\.RayTaskError\(BroadcastCollectiveTimeoutError\): "
        r"ray::SynchronizationActor\.broadcast_from_rank_zero\(\).*",
        r"ray::SynchronizationActor\.broadcast_from_rank_zero\(\).*",
        r"asyncio\.exceptions\.CancelledError",
        r"TimeoutError",
        r"ray\.train\.v2\._internal\.exceptions\.BroadcastCollectiveTimeoutError: The collective operation "
        r"timed out after [\d.]+ seconds\. The following ranks have not joined the collective operation: "
        r"\[[\d, ]+\]",
        r"You can set the timeout with the RAY_TRAIN_COLLECTIVE_TIMEOUT_S environment variable .*",
    ),
    explained_by=r"BroadcastCollectiveTimeoutError",
)

# lesson -> the first line of each cell in FAILURES_ON_PURPOSE -> the kinds of red line it may print. Read
# from executed copies of lesson 04 (Ray 2.60.0): a kind not listed is a red line nobody explained.
_A_RANK_RAISES = (TRACEBACK_FRAMES, DEDUP_NOTICE, RANK_ERROR, GLOO_PEER)  # an exception: the process lives on
_A_WORKER_DIES = (*_A_RANK_RAISES, GRACEFUL_SHUTDOWN, ACTOR_DIED)  # the process itself is gone
RED_LINES: dict[str, dict[str, tuple[RedLine, ...]]] = {
    "04_fault_tolerance.ipynb": {
        "# 03. Automatic retries: a rank crashes mid-epoch": (*_A_RANK_RAISES, INJECTED),
        "# 12. A worker killed from outside, resumed at the exact batch": (*_A_WORKER_DIES, OOM_GUESS),
        "# 13. Elastic training: the part you would write on a real cluster": (
            *_A_WORKER_DIES,
            NODE_DIED,
            STARTUP_TIMEOUT,
        ),
        "# 14. Troubleshooting: a hang when one rank skips report": (
            TRACEBACK_FRAMES,
            DEDUP_NOTICE,
            RANK_ERROR,
            BARRIER_WARNING,
            COLLECTIVE_TIMEOUT,
        ),
        "# 11. Exercise 4: count steps across a restart": (*_A_RANK_RAISES, CHECK_CRASH),
    },
}


def _plain(line: str) -> tuple[str, bool]:
    """A stderr line without colour, Ray's prefix and its repeat mark; and whether it carried the dedup notice."""
    line = _RAY_PREFIX.sub("", _COLOUR.sub("", line).rstrip())
    notice = bool(_DEDUP_NOTICE.search(line))
    return _REPEATED.sub("", _DEDUP_NOTICE.sub("", line)).rstrip(), notice


def _first_line(cell) -> str | None:
    """A code cell's first line (its ``# NN. Title``), None for a markdown cell."""
    if cell.cell_type != "code":
        return None
    return cell.source.splitlines()[0] if cell.source else ""


def _markdown(nb, index: int) -> str | None:
    """The source of cell ``index`` if it is a markdown cell, else None."""
    if 0 <= index < len(nb.cells) and nb.cells[index].cell_type == "markdown":
        return nb.cells[index].source
    return None


def unexplained_red_lines(nb, name: str, *, all_kinds: bool = False) -> list[str]:
    """What a learner would read as unexplained red output in the cells of lesson ``name`` that fail on purpose.

    For each such cell (``FAILURES_ON_PURPOSE[name]``, its kinds in ``RED_LINES[name]``), one line each for:
    (a) a stderr line of no known kind; (b) a kind it printed that the markdown cell right after it does not
    explain (``RedLine.explained_by``); (c) no announcement (``ANNOUNCEMENT``) in the markdown cell right before
    it. Stderr of a cell run again with its exercise answered (same first line, appended at the end) counts
    for the shipped cell, whose markdown is read. ``all_kinds=True`` checks every listed kind, printed or not,
    and every listed cell's announcement: what a lesson as committed (no outputs) can be checked for.
    """
    catalogue = RED_LINES.get(name, {})
    found: list[str] = []
    for first in FAILURES_ON_PURPOSE.get(name, ()):
        cells = [i for i, c in enumerate(nb.cells) if _first_line(c) == first]
        if not cells:
            continue
        shipped = cells[0]
        where = f"cell {shipped} ({first!r})"
        kinds = catalogue.get(first)
        stderr = [
            line
            for i in cells
            for out in nb.cells[i].get("outputs", [])
            if out.output_type == "stream" and out.get("name") == "stderr"
            for line in out.get("text", "").splitlines()
        ]
        if kinds is None:
            if stderr or all_kinds:
                found.append(f"{where} fails on purpose, but RED_LINES lists no red lines for it")
            continue
        seen: list[RedLine] = list(kinds) if all_kinds else []
        for line in stderr:
            plain, notice = _plain(line)
            if notice and DEDUP_NOTICE in kinds:
                seen.append(DEDUP_NOTICE)
            kind = next((k for k in kinds if k.matches(plain)), None)
            if kind is None:
                found.append(f"{where}: a red line of no known kind: {plain[:200]!r}")
            else:
                seen.append(kind)
        after = _markdown(nb, shipped + 1) or ""
        earlier = [
            _markdown(nb, i + 1) or ""
            for i, c in enumerate(nb.cells[:shipped])
            if _first_line(c) in FAILURES_ON_PURPOSE[name]
        ]
        for kind in dict.fromkeys(seen):
            texts = [after, *earlier] if kind.once else [after]
            if not any(re.search(kind.explained_by, text, re.IGNORECASE) for text in texts):
                found.append(
                    f"{where}: {kind.name}, not explained in the markdown cell after it "
                    f"(it should say {kind.explained_by!r})"
                )
        if (stderr or all_kinds) and not ANNOUNCEMENT.search(_markdown(nb, shipped - 1) or ""):
            found.append(
                f"{where}: the markdown cell right before it does not announce its red output "
                f"('**Red output ahead, expected:** ...')"
            )
    return found


def _exception_line(text: str) -> str:
    """The first traceback's ``SomeError: message`` line, without Ray's colour and ``(Actor pid=..)`` prefix."""
    lines = text[text.index(TRACEBACK) :].splitlines()[1:]
    for line in lines:
        plain = re.sub(r"\x1b\[[0-9;]*m", "", line)
        plain = re.sub(r"^\([^)]*\)\s?", "", plain)
        if plain and not plain.startswith(" "):
            return plain[:200]
    return ""
