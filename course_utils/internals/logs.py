"""Ray's own log lines go to the Ray session's log folder; a lesson's output shows the lesson's.

The sources of noise in a notebook, each sent to the log folder by the knob Ray has for it:

- Ray Train's INFO lines (resources requested, worker group started, every
  ``Reporting training result ...: TrainingReport(...)`` from every rank): the run's
  ``RunConfig(logging_config=LoggingConfig(log_level="WARNING"))`` (``TRAIN_LOG_LEVEL``).
  The console and app logs then keep warnings and errors only; Ray Train's system logs
  ``logs/train/ray-train-sys-*.log`` keep everything. A failed rank's traceback is logged at
  ERROR, so a real failure still shows. Two Ray Train modules name their logger
  ``getLogger(__file__)`` (the report line's among them), which puts them outside ``ray.train``
  and past that level: the worker setup hook below hands their records to the logger Ray meant.
- The driver's own ``ray.init`` INFO lines: ``ray.init(logging_level=DRIVER_LOG_LEVEL)``
  (``start_ray`` passes it; the session line it prints names the address, dashboard and logs).
- A traceback from Ray Train's ``PlacementGroupCleanerMonitor`` thread, which dies on a GCS
  timeout under load (Ray catches only ``RayStateApiException`` there): the worker setup hook
  below writes that one thread's traceback into ``logs/train/`` instead of stderr. Every other
  thread's exception keeps Python's default hook.
- What Ray Train's detached ``PlacementGroupCleaner`` actor logs about itself (e.g. "Monitor thread
  did not exit within 12.00 seconds"): that process runs no Ray Train logging setup, so its
  records went to stderr; the hook gives its logger a file in ``logs/train/`` instead.
- The controller's ERROR "Failed to stop PlacementGroupCleaner gracefully." (with a
  ``GetTimeoutError`` traceback) when that helper is slow to stop under load, at the end of a run:
  the hook files it as INFO, so Ray Train's level filter keeps it in
  ``logs/train/ray-train-sys-controller-*.log`` only. Nothing else is re-levelled.

- Ray Data's INFO lines ("Starting execution of Dataset ...", "Execution plan ...", "Tip: ...") on
  the driver and in its actors: ``RAY_DATA_LOG_LEVEL=WARNING`` (``DATA_LOG_LEVEL``), which Ray Data
  reads each time it configures its logger, in every process (``quiet_ray_data`` for a driver that
  imported ``ray.data`` before). Its warnings stay: a split reader blocked for 30 s is a real signal.
- Ray Data's "Progress bars disabled" warning, which the course's own ``enable_progress_bars = False``
  causes: that one module's logger at ERROR, in the driver and every worker.

The Ray Train logger, thread and message names involved are internal to Ray; they live in
``course_utils.internals.rayinternals`` with the Ray versions they were checked on.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from course_utils.internals import rayinternals

TRAIN_LOG_LEVEL = "WARNING"
DATA_LOG_LEVEL = "WARNING"
DRIVER_LOG_LEVEL = logging.WARNING
# runtime_env["worker_process_setup_hook"]: every worker process of the job (the controller's
# detached PlacementGroupCleaner included) imports and calls it when it starts.
WORKER_SETUP_HOOK = "course_utils.internals.logs.setup_worker"
# Ray-internal threads whose uncaught exception is Ray's to log, not the lesson's to show.
RAY_INTERNAL_THREADS = (rayinternals.TRAIN_CLEANER_THREAD,)
# Ray Train modules whose logger is getLogger(__file__), a path, instead of their module name.
MISNAMED_LOGGERS = rayinternals.TRAIN_PATH_NAMED_LOGGERS
# The logger of Ray Train's detached helper actor, whose own process has no Ray Train logging setup.
CLEANER_LOGGER = rayinternals.TRAIN_CLEANER_LOGGER
# Ray Train's messages about its own helpers, not the run, that it logs above INFO: logger -> starts.
RAY_INTERNAL_MESSAGES = rayinternals.TRAIN_HELPER_MESSAGES
# Deprecation warnings about a library's own calls, not the learner's: Train V2's state tracking (on for
# lesson 04's run table) reads ExecutionOptions.exclude_resources in the controller at every fit, and
# torchdata's StatefulDataLoader calls torch.set_vital in every worker that builds one (lesson 04).
# Ray Data's iter_torch_batches hands torch read-only arrays from the object store and silences torch's
# warning about them with warnings.catch_warnings(), which is not thread-safe: with its prefetch thread
# running, the warning escaped once in a lesson 03 rank on the hosts tier (Ray Data never writes to them).
LIBRARY_INTERNAL_WARNINGS = (
    r"`ExecutionOptions\.exclude_resources` is deprecated",
    r"'set_vital' is deprecated",
    r"The given NumPy array is not writable",
)


class _AsInfo(logging.Filter):
    """Re-level the records whose message starts with one of ``starts`` to INFO.

    A filter on the logger itself: Ray Train's ``dictConfig`` resets its child loggers' level
    and handlers, not their filters.
    """

    def __init__(self, starts: tuple[str, ...]):
        super().__init__()
        self.starts = starts

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno > logging.INFO and str(record.msg).startswith(self.starts):
            record.levelno, record.levelname = logging.INFO, "INFO"
        return True


class _ToLogger(logging.Filter):
    """Hand each record to the logger ``target`` instead (and its handlers: Ray Train's level
    filter, its log files), as if the module had named its logger ``target``."""

    def __init__(self, target: str):
        super().__init__()
        self.target = target

    def filter(self, record: logging.LogRecord) -> bool:
        record.name = self.target
        logging.getLogger(self.target).handle(record)
        return False


class _LogFolder(logging.Handler):
    """Append records to ``logs/train/<name>-<pid>.err``; the file is made at the first record."""

    def __init__(self, name: str):
        super().__init__()
        self.file = name
        self.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s -- %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        path = _log_file(self.file)
        if path is None:
            logging.lastResort.handle(record)  # outside a Ray worker: stderr, as before
            return
        with open(path, "a") as f:
            f.write(self.format(record) + "\n")


def _module_file(module: str) -> str:
    """The ``__file__`` a ``ray`` submodule will have, without importing it."""
    import ray

    return os.path.join(ray.__path__[0], *module.split(".")[1:]) + ".py"


def quiet_ray_data() -> None:
    """Ray Data's INFO lines and its warning about the course's own progress-bar setting stay out of
    this process's output (see the module doc); its warnings and errors still show. So do the
    libraries' warnings about their own calls (``LIBRARY_INTERNAL_WARNINGS``), in a worker and in the
    driver alike: the driver iterates Ray Data's torch batches too (lesson 03)."""
    import warnings

    for message in LIBRARY_INTERNAL_WARNINGS:
        warnings.filterwarnings("ignore", message=message)
    os.environ.setdefault(rayinternals.DATA_LOG_LEVEL_ENV, DATA_LOG_LEVEL)
    logging.getLogger(rayinternals.DATA_PROGRESS_LOGGER).setLevel(logging.ERROR)
    data_logger = logging.getLogger("ray.data")
    if data_logger.level < logging.getLevelName(os.environ[rayinternals.DATA_LOG_LEVEL_ENV]):
        data_logger.setLevel(os.environ[rayinternals.DATA_LOG_LEVEL_ENV])  # ray.data imported already


def setup_worker() -> None:
    """Ray-internal tracebacks to the log folder, not the notebook (see the module doc); and this
    process names its own cluster.

    Ray Train's PlacementGroupCleaner asks the state API about the controller without naming a
    cluster; in a worker that falls back to ``/tmp/ray/ray_current_cluster``, the last ``ray start``
    on this machine (stale, or someone else's cluster): each query then waited ~10 s and every fit
    ended 12 s late. ``RAY_ADDRESS`` set to this process's own cluster makes the lookup exact.
    """
    import threading

    import ray

    if ray.is_initialized():  # in a Ray worker process: always; in a unit test, not
        os.environ["RAY_ADDRESS"] = ray.get_runtime_context().gcs_address
    quiet_ray_data()

    default = threading.excepthook

    def hook(args) -> None:
        thread = getattr(args.thread, "name", "")
        path = _log_file(thread) if thread in RAY_INTERNAL_THREADS else None
        if path is None:
            default(args)
            return
        import traceback

        with open(path, "a") as f:
            f.write(f"Exception in thread {thread}:\n")
            traceback.print_exception(args.exc_type, args.exc_value, args.exc_traceback, file=f)

    threading.excepthook = hook
    for name, starts in RAY_INTERNAL_MESSAGES.items():
        logging.getLogger(name).addFilter(_AsInfo(starts))
    for module in MISNAMED_LOGGERS:
        logging.getLogger(_module_file(module)).addFilter(_ToLogger(module))
    # In the controller Ray Train's dictConfig resets this (a child of ray.train) to its own handlers.
    cleaner = logging.getLogger(CLEANER_LOGGER)
    cleaner.addHandler(_LogFolder("PlacementGroupCleaner"))
    cleaner.propagate = False


def session_logs_dir() -> Path | None:
    """This process's Ray session log folder (``<temp dir>/<session name>/logs``); None without Ray.

    From public API: the runtime context's node temp dir and session name (Ray lays the session
    folder out as that pair). In a worker it is the worker's own node's folder.
    """
    import ray

    if not ray.is_initialized():
        return None
    context = ray.get_runtime_context()
    return Path(context.get_temp_dir()) / context.get_session_name() / "logs"


def _log_file(thread: str) -> str | None:
    """``<session>/logs/train/<thread>-<pid>.err``, or None outside a Ray worker."""
    try:
        logs = session_logs_dir()
        if logs is None:
            return None
        folder = logs / "train"
        folder.mkdir(parents=True, exist_ok=True)
        return str(folder / f"{thread}-{os.getpid()}.err")
    except Exception:
        return None


class DriverLog:
    """This driver's own Ray log file, read from where it ended when this object was made.

    Ray's C++ lines from the driver process (warnings and errors of its core worker) go to the
    driver's stderr, which Jupyter shows in the cell or only in the terminal it runs in, and to
    this file: so a cell can count a line it announced as possible (``count``), wherever it showed.
    Without a local log file (no Ray yet, a Ray Client connection) ``count`` is 0.
    """

    def __init__(self) -> None:
        self.path = self._find()
        self.start = self.path.stat().st_size if self.path else 0

    @staticmethod
    def _find() -> Path | None:
        folder = session_logs_dir()
        if folder is None:
            return None
        found = sorted(folder.glob(f"{rayinternals.driver_log_prefix()}-*_{os.getpid()}.log"))
        return found[-1] if found else None

    def count(self, text: str) -> int:
        """How many lines written since this object was made contain ``text``."""
        if self.path is None or not self.path.exists():
            return 0
        with self.path.open("rb") as log:
            log.seek(self.start)
            return sum(text in line for line in log.read().decode(errors="replace").splitlines())
