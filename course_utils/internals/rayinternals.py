"""Every place the course relies on a Ray name that is not public API, in one module.

The rest of ``course_utils`` uses public Ray API only (``tests/unit/test_rayinternals.py`` greps
for ``ray._private`` and ``_internal`` elsewhere). What is here has no public replacement in the
Ray versions named on each item; each item has a unit test in ``tests/unit/test_rayinternals.py``
that fails, naming the item, when a Ray upgrade moves or renames it. On an upgrade: run those
tests, fix what they name here, and update the versions in the docstrings.

Nothing is imported at module level: a touchpoint imports Ray's module when it is used.
"""

from __future__ import annotations

import logging
import re
from typing import Any

# --- Driver start-up -------------------------------------------------------------------------------

# Ray's logger for its token-authentication set-up (ray/_private/authentication/
# authentication_token_setup.py). Checked on 2.60.0 (the module exists in 2.58.0 too).
TOKEN_AUTH_SETUP_LOGGER = "ray._private.authentication.authentication_token_setup"


def quiet_token_auth_notice() -> None:
    """Keep Ray's "Token authentication is enabled for this Ray cluster. Set RAY_AUTH_MODE=disabled
    to opt out." WARNING, logged at every local ``ray.init`` since Ray 2.59, out of the lessons.

    Why: lesson 01 explains the token once; the notice repeated in every lesson is noise, and its
    advice (turn authentication off) is the one the course never gives. Only that logger goes to
    ERROR. Its other warning ("Token authentication is disabled ...") comes from ``ray start``, a
    process of its own, and is not affected. Checked on Ray 2.60.0.
    """
    logging.getLogger(TOKEN_AUTH_SETUP_LOGGER).setLevel(logging.ERROR)


def quiet_driver_stop_stack() -> None:
    """No C++ stack on a learner's screen when Jupyter, papermill or nbmake stops a kernel that runs Ray.

    Why: a stopped kernel gets SIGTERM, and the Ray driver inside it has absl's failure signal handler
    installed, which prints "*** SIGTERM received at time=... PC: @ ... kill" with a C++ stack (about 20
    lines) to the kernel's stderr: an ordinary stop shown as a crash. Ray's setting for it is
    ``RAY_DISABLE_FAILURE_SIGNAL_HANDLER``, read from the environment into
    ``ray._private.ray_constants`` when Ray is imported and used when ``ray.init`` starts the driver's
    core worker. Setting the environment variable would also reach every worker this driver's local Ray
    starts, and a worker that really crashes should keep its stack in its log; so only this process's
    constant is set, before ``ray.init``. Checked on Ray 2.60.0 (measured: 6 lines of stack with the
    handler, none without).
    """
    from ray._private import ray_constants

    ray_constants.RAY_DISABLE_FAILURE_SIGNAL_HANDLER = True


# Abseil's mutex event trace (absl/synchronization/mutex.cc, PostSynchEvent, compiled into _raylet.so): one
# line per lock event of a mutex whose word carries Abseil's "event" bit, "[mutex.cc : 452] RAW: Lock blocking
# 0x... @ 0x... 0x...", then "Lock returning" and "Unlock". Only the event names below; Abseil's real findings
# ("Potential Mutex deadlock", "Check failed") read otherwise and still reach the notebook.
ABSEIL_MUTEX_TRACE = (
    r"^\[mutex\.cc : \d+\] RAW: (?:(?:Reader)?(?:TryLock succeeded|TryLock failed|Lock blocking|Lock returning)"
    r"|(?:Reader)?Unlock|Wait on|Signal on|SignalAll on) 0x[0-9a-f]+"
)


def skip_abseil_mutex_trace() -> None:
    """Keep Abseil's mutex event trace, printed by Ray worker processes, out of the driver's output.

    Why: a Ray worker (a Ray Data read task, Ray Train's placement-group cleaner) sometimes prints
    ``ABSEIL_MUTEX_TRACE`` lines on its stderr, which Ray forwards into the cell as red lines: seen on
    clusters joined with ``RAY_ADDRESS`` and, on 2026-12-07, on a local Ray (lesson 03's Going further).
    Nothing failed; Abseil logs at that level whatever its settings (raw logging, compiled in). Ray's
    documented setting for lines a driver should not print is ``RAY_DEDUP_LOGS_SKIP_REGEX``, read when
    Ray is imported into the driver's two log deduplicators; the course has imported Ray before
    ``start_ray``, so the pattern goes to those deduplicators here, after a learner's own pattern. The
    lines stay in the worker's log file. Checked on Ray 2.60.0.
    """
    from ray._private import ray_logging

    for deduplicator in (ray_logging.stdout_deduplicator, ray_logging.stderr_deduplicator):
        own = deduplicator.skip_re.pattern if deduplicator.skip_re else None
        if own is not None and ABSEIL_MUTEX_TRACE in own:
            continue
        deduplicator.skip_re = re.compile(f"(?:{own})|{ABSEIL_MUTEX_TRACE}" if own else ABSEIL_MUTEX_TRACE)


def worker_setup_hook_env_var() -> str:
    """The environment variable a Ray worker reads its setup hook from at start-up
    (``ray_constants.WORKER_PROCESS_SETUP_HOOK_ENV_VAR``, read by ``default_worker.py``).

    Why: ``runtime_env={"worker_process_setup_hook": ...}`` is the public route, but any job
    runtime_env makes the raylet start every worker through ``setup_worker.py`` (a second Python
    start-up, ~0.4 s CPU per worker). A local Ray's workers inherit the driver's environment, so
    ``session.start_ray`` sets this variable there instead. Ray refuses it inside a runtime_env's
    ``env_vars`` ("reserved for the internal use"), not in the process environment. Checked on Ray
    2.58.0 and 2.60.0.
    """
    from ray._private import ray_constants

    return ray_constants.WORKER_PROCESS_SETUP_HOOK_ENV_VAR


# The core worker's ERROR line when an actor whose constructor arguments sit in the object store may
# be restarted (src/ray/core_worker/core_worker.cc, compiled into _raylet.so). Ray Data's pool actors
# (lesson 05's MapWorker) get it. Like every C++ line of the driver it goes to the driver's stderr,
# which Jupyter shows in the cell or only in its terminal, and to the driver's own log file
# (``driver_log_prefix``), where lesson 05 counts it (``logs.DriverLog``). Checked on Ray 2.60.0.
ACTOR_ARGS_RESTART_WARNING = "has constructor arguments in the object store and max_restarts > 0"


# The raylet's disk guard (src/ray/common/file_system_monitor.cc, RayConfig local_fs_capacity_threshold):
# once the disk that holds a node's session folder (where it spills objects) is more than this share
# used, the node refuses to spill and logs "<folder> is over 95% full ..." at ERROR every 10 s, which
# reaches every driver's cell. Like every RayConfig entry the raylet reads RAY_<name> from its
# environment when it starts. No public setting: Ray's docs dropped it. Checked on Ray 2.60.0.
DISK_THRESHOLD_ENV = "RAY_local_fs_capacity_threshold"
DISK_THRESHOLD_DEFAULT = 0.95
DISK_FULL_LINE = "% full, available space:"


def default_temp_dir() -> str:
    """The folder a local ``ray.init`` puts its session under (``/tmp/ray``, or ``$RAY_TMPDIR/ray``),
    as Ray decides it (``ray._common.utils.get_default_ray_temp_dir``). Checked on Ray 2.60.0."""
    from ray._common.utils import get_default_ray_temp_dir

    return get_default_ray_temp_dir()


def driver_log_prefix() -> str:
    """How Ray names a driver's own log file in the session's ``logs`` folder:
    ``<prefix>-<worker id>_<pid>.log`` (``ray_constants.PROCESS_TYPE_PYTHON_CORE_WORKER_DRIVER``).

    Why: Ray has no public call that names the file. Checked on Ray 2.60.0.
    """
    from ray._private import ray_constants

    return ray_constants.PROCESS_TYPE_PYTHON_CORE_WORKER_DRIVER


# --- Ray Train V2's internal loggers, threads and messages (course_utils.internals.logs) ----------------------

# Ray Train modules whose logger is ``getLogger(__file__)``, a path, instead of their module name,
# which puts their records (each rank's "Reporting training result ...: TrainingReport(...)")
# outside ``ray.train`` and its level. Checked on Ray 2.58.0 and 2.60.0.
TRAIN_PATH_NAMED_LOGGERS = ("ray.train.v2._internal.execution.context", "ray.train.collective.collectives")
# The logger of Ray Train's detached PlacementGroupCleaner actor, whose process has no Ray Train
# logging set-up. Checked on Ray 2.58.0 and 2.60.0.
TRAIN_CLEANER_LOGGER = "ray.train.v2._internal.execution.controller.placement_group_cleaner"
# The thread of that helper whose uncaught GCS timeout printed a traceback into lessons.
# Checked on Ray 2.58.0 and 2.60.0.
TRAIN_CLEANER_THREAD = "PlacementGroupCleanerMonitor"
# Ray Train's messages about its own helpers, not the run, that it logs above INFO: logger -> starts.
# Checked on Ray 2.58.0 and 2.60.0.
TRAIN_HELPER_MESSAGES = {
    "ray.train.v2._internal.callbacks.placement_group_callback": ("Failed to stop PlacementGroupCleaner",),
}

# --- Ray Train V2's internals that the hang inspection reads (course_utils.internals.stacks) -----------------

# The frame of Ray Train's wrapper that calls the training function (``construct_train_func`` in
# ray/train/v2/_internal/util.py): the frame just inside it is the learner's function.
# Checked on Ray 2.58.0 and 2.60.0.
TRAIN_FN_ENTRY = "construct_train_func.<locals>.train_fn"
# The actor behind ``ray.train.report``'s barrier, and its warning while a rank is missing
# (ray/train/v2/_internal/execution/checkpoint/sync_actor.py). Checked on Ray 2.58.0 and 2.60.0.
TRAIN_SYNC_ACTOR_CLASS = "SynchronizationActor"
TRAIN_BARRIER_WARNING = "has not been called by all"

# --- Ray Train V2's elastic policy (course_utils.lesson04.elastic.scaling_decisions) -------------------------

# The elastic scaling policy's INFO lines in the controller's system log
# (ray/train/v2/_internal/execution/scaling_policy/elastic.py). Checked on Ray 2.58.0 and 2.60.0.
ELASTIC_START_DECISION = "Deciding to start/restart training"  # "... resources for N workers ..."
ELASTIC_RESIZE_DECISION = "Deciding to resize the worker group"  # "... from A -> B workers."

# --- Ray Data internals ----------------------------------------------------------------------------

# The actor coordinating a ``streaming_split``, and its warning when one reader has waited
# BLOCKED_CLIENT_WARN_TIMEOUT (30 s) for the others at an epoch's start
# (ray/data/_internal/iterator/stream_split_iterator.py). The coordinator's barrier state
# (``_num_unarrived_splits_at_barrier``) is private, with no method or state-API field that
# exposes it, so the course reads the warning. Checked on Ray 2.58.0 and 2.60.0 (same wording).
SPLIT_COORDINATOR_CLASS = "SplitCoordinator"
SPLIT_WARNING = "blocked waiting on other clients"

# Ray Data's own logging (ray/data/_internal/logging.py): ``configure_logging`` sets the ``ray.data``
# logger's level from the variable RAY_DATA_LOG_LEVEL when set (else DEBUG, with INFO lines on
# the console: "Starting execution of Dataset ...", "Tip: use take_batch() ..."). It runs when
# ``ray.data`` is imported and again in every worker for each dataset, so the variable, which
# worker processes inherit, is what holds everywhere. Checked on Ray 2.58.0 and 2.60.0.
DATA_LOG_LEVEL_ENV = "RAY_DATA_LOG_LEVEL"
# The module that warns "Progress bars disabled ..." once per process when a pipeline runs with
# ``DataContext.enable_progress_bars = False``: the course's own choice (lesson 03 sets it; maintainer_tools.fits.configure_data_context for tests).
DATA_PROGRESS_LOGGER = "ray.data._internal.progress"

# Ray's autoscaling coordinator, a detached actor the first elastic Train run (or Ray Data
# pipeline) on a cluster creates (ray/data/_internal/cluster_autoscaler/
# default_autoscaling_coordinator.py: ``get_or_create_autoscaling_coordinator``). An elastic run
# sizes its worker group from the nodes the coordinator last read, which it re-reads every
# ``_AutoscalingCoordinatorActor.TICK_INTERVAL_S`` (a class constant: no setting changes it).
# Checked on Ray 2.58.0 and 2.60.0.
AUTOSCALING_COORDINATOR_NAME = "AutoscalingCoordinator"
AUTOSCALING_COORDINATOR_NAMESPACE = "AutoscalingCoordinator"
AUTOSCALING_COORDINATOR_REFRESH_S = 20


def tick_autoscaling_coordinator(coordinator: Any, timeout_s: float) -> None:
    """Run the coordinator's periodic refresh once now (its private ``_tick``: re-read the nodes,
    re-divide them among requests), waiting at most ``timeout_s``. Raises what Ray raises.

    Ray has no public call for it (the coordinator's public methods request, cancel and read
    reservations). Checked on Ray 2.58.0 and 2.60.0.
    """
    import ray

    ray.get(coordinator._tick.remote(), timeout=timeout_s)


def start_autoscaling_coordinator() -> Any:
    """Create Ray's autoscaling coordinator if the cluster has none yet (``get_or_create_autoscaling_coordinator``
    in ray/data/_internal/cluster_autoscaler/default_autoscaling_coordinator.py); its handle, at once.

    Why: every Train V2 fit's controller registers its workers' resources with this detached actor,
    waiting 5 s for the answer (``AUTOSCALING_REQUESTS_GET_TIMEOUT_S`` in
    ray/train/v2/_internal/execution/scaling_policy/autoscaling_coordinator_client.py). The first fit on
    a fresh cluster creates it then; where starting its worker process takes longer than 5 s (a fresh
    16-core node starting a dozen worker processes at once, first seen on a GPU machine) the request
    times out and the controller logs "Failed to send resource request" with a traceback into the
    notebook. Ray has no public call that creates it. Checked on Ray 2.60.0.
    """
    from ray.data._internal.cluster_autoscaler.default_autoscaling_coordinator import (
        get_or_create_autoscaling_coordinator,
    )

    return get_or_create_autoscaling_coordinator()
