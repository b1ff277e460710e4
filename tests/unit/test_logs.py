import threading

from course_utils.internals import logs, rayinternals


def _crash_in(name: str) -> None:
    def boom():
        raise RuntimeError(f"boom in {name}")

    thread = threading.Thread(target=boom, name=name)
    thread.start()
    thread.join()


def _hooked(monkeypatch, log_path):
    """setup_worker() over a recording hook (the one it must fall back to); restored after the test."""
    seen = []
    monkeypatch.setattr(threading, "excepthook", lambda args: seen.append(args.thread.name))
    monkeypatch.setattr(logs, "_log_file", lambda thread: log_path)
    import logging

    for name in [*logs.RAY_INTERNAL_MESSAGES, *map(logs._module_file, logs.MISNAMED_LOGGERS)]:
        monkeypatch.setattr(logging.getLogger(name), "filters", [])  # the hook's filters go after the test
    monkeypatch.setattr(logging.getLogger(logs.CLEANER_LOGGER), "handlers", [])
    monkeypatch.setattr(logging.getLogger(logs.CLEANER_LOGGER), "propagate", True)
    logs.setup_worker()
    return seen


def test_ray_internal_thread_traceback_goes_to_the_log_folder(tmp_path, monkeypatch):
    log = tmp_path / "PlacementGroupCleanerMonitor.err"
    seen = _hooked(monkeypatch, str(log))
    _crash_in("PlacementGroupCleanerMonitor")
    assert seen == []  # not on stderr
    assert "Traceback (most recent call last)" in log.read_text()
    assert "boom in PlacementGroupCleanerMonitor" in log.read_text()
    _crash_in("the learner's thread")  # any other thread: the previous hook, as always
    assert seen == ["the learner's thread"]


def test_outside_a_ray_worker_nothing_is_hidden(monkeypatch):
    seen = _hooked(monkeypatch, None)  # no Ray session: no log folder
    _crash_in("PlacementGroupCleanerMonitor")
    assert seen == ["PlacementGroupCleanerMonitor"]


def test_ray_trains_failure_to_stop_its_helper_is_filed_as_info(monkeypatch):
    import logging

    _hooked(monkeypatch, None)
    name = next(iter(logs.RAY_INTERNAL_MESSAGES))
    logger = logging.getLogger(name)
    seen = []

    class Keep(logging.Handler):
        def emit(self, record):
            seen.append((record.levelname, record.getMessage()))

    handler = Keep()
    logger.addHandler(handler)
    try:
        logger.error("Failed to stop PlacementGroupCleaner gracefully.")
        logger.error("Something else went wrong.")  # anything else keeps its level
    finally:
        logger.removeHandler(handler)
    assert seen == [
        ("INFO", "Failed to stop PlacementGroupCleaner gracefully."),
        ("ERROR", "Something else went wrong."),
    ]


def test_a_logger_named_by_its_file_reaches_ray_train_like_the_others(monkeypatch):
    import importlib
    import logging

    _hooked(monkeypatch, None)
    module = logs.MISNAMED_LOGGERS[0]  # the module whose logger carries the report line
    assert logs._module_file(module) == importlib.import_module(module).__file__
    misnamed = logging.getLogger(logs._module_file(module))  # what that module logs on
    seen = []

    class Keep(logging.Handler):
        def emit(self, record):
            seen.append((record.name, record.getMessage()))

    train, root = Keep(), Keep()
    monkeypatch.setattr(logging.getLogger("ray.train"), "handlers", [train])
    monkeypatch.setattr(logging.getLogger("ray.train"), "propagate", False)
    monkeypatch.setattr(logging.root, "handlers", [root])
    misnamed.warning("Reporting training result 1: TrainingReport(...)")
    assert seen == [(module, "Reporting training result 1: TrainingReport(...)")]  # through ray.train only


def test_the_cleaner_actors_own_log_lines_go_to_the_log_folder(tmp_path, monkeypatch):
    import logging

    cleaner = logging.getLogger(logs.CLEANER_LOGGER)
    _hooked(monkeypatch, str(tmp_path / "PlacementGroupCleaner.err"))
    seen = []

    class Keep(logging.Handler):
        def emit(self, record):
            seen.append(record.getMessage())

    monkeypatch.setattr(logging.root, "handlers", [Keep()])
    cleaner.warning("Monitor thread did not exit within %.2f seconds", 12)
    assert seen == []  # not on the worker's stderr, so not in the notebook
    assert "WARNING" in (tmp_path / "PlacementGroupCleaner.err").read_text()
    assert (
        "Monitor thread did not exit within 12.00 seconds"
        in (tmp_path / "PlacementGroupCleaner.err").read_text()
    )


def test_libraries_warnings_about_their_own_deprecated_calls_are_not_shown(monkeypatch):
    import warnings

    with warnings.catch_warnings(record=True) as shown:  # the filters setup_worker adds go after the test
        warnings.simplefilter("always")
        _hooked(monkeypatch, None)
        warnings.warn(
            "`ExecutionOptions.exclude_resources` is deprecated and will be removed",
            DeprecationWarning,
            stacklevel=1,
        )
        from torchdata.stateful_dataloader import StatefulDataLoader

        StatefulDataLoader(list(range(4)), batch_size=2)  # torchdata calls torch.set_vital itself
        warnings.warn("`something_else` is deprecated", DeprecationWarning, stacklevel=1)
    assert [str(w.message) for w in shown] == ["`something_else` is deprecated"]


def test_ray_datas_info_lines_and_progress_bar_notice_stay_out_of_a_lesson(monkeypatch, capsys):
    import logging

    from course_utils.internals import rayinternals

    monkeypatch.delenv(rayinternals.DATA_LOG_LEVEL_ENV, raising=False)
    data_logger, progress = (
        logging.getLogger("ray.data"),
        logging.getLogger(rayinternals.DATA_PROGRESS_LOGGER),
    )
    monkeypatch.setattr(data_logger, "level", logging.DEBUG)  # as Ray Data's import leaves it
    monkeypatch.setattr(progress, "level", logging.NOTSET)
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    monkeypatch.setattr(data_logger, "handlers", [handler])
    monkeypatch.setattr(data_logger, "propagate", False)
    logs.quiet_ray_data()
    import os

    assert os.environ[rayinternals.DATA_LOG_LEVEL_ENV] == "WARNING"  # what Ray Data reads in every process
    logging.getLogger("ray.data._internal.execution.streaming_executor").info(
        "Starting execution of Dataset x"
    )
    progress.warning("Progress bars disabled. To enable, set ...")
    logging.getLogger("ray.data._internal.iterator").warning(
        "blocked waiting on other clients for more than 30s"
    )
    assert [r.getMessage() for r in records] == ["blocked waiting on other clients for more than 30s"]


def test_a_worker_hears_no_library_internal_warning_and_every_other_one(monkeypatch):
    """The warnings LIBRARY_INTERNAL_WARNINGS names are dropped in a worker; any other still shows."""
    import warnings

    with warnings.catch_warnings(record=True) as heard:
        warnings.simplefilter("always")
        _hooked(monkeypatch, None)
        torch_says = (
            "The given NumPy array is not writable, and PyTorch does not support non-writable tensors."
        )
        warnings.warn(torch_says, stacklevel=1)
        warnings.warn("'set_vital' is deprecated, please do not call", stacklevel=1)
        warnings.warn("a warning about the learner's own code", stacklevel=1)
    assert [str(w.message) for w in heard] == ["a warning about the learner's own code"]


def test_the_driver_hears_no_library_internal_warning_either():
    """Lesson 03's driver iterates Ray Data's torch batches: torch's read-only-array warning escaped
    there once (Ray Data's own catch_warnings is not thread-safe), so quiet_ray_data, which start_ray
    runs in the driver, drops the same warnings, and any other still shows."""
    import warnings

    with warnings.catch_warnings(record=True) as heard:
        warnings.simplefilter("always")
        logs.quiet_ray_data()
        warnings.warn("The given NumPy array is not writable, and PyTorch does not support", stacklevel=1)
        warnings.warn("a warning about the learner's own code", stacklevel=1)
    assert [str(w.message) for w in heard] == ["a warning about the learner's own code"]


def test_driver_log_counts_only_lines_written_after_it_was_made(tmp_path, monkeypatch):
    import os

    monkeypatch.setattr(logs, "session_logs_dir", lambda: tmp_path)
    log = tmp_path / f"python-core-driver-01000000ffff_{os.getpid()}.log"
    (tmp_path / "python-core-driver-02000000ffff_1.log").write_text(
        f"{rayinternals.ACTOR_ARGS_RESTART_WARNING}\n"
    )
    log.write_text(f"before: {rayinternals.ACTOR_ARGS_RESTART_WARNING}\n")
    mark = logs.DriverLog()
    with log.open("a") as out:
        out.write(
            f"E core_worker.cc: Actor 'MapWorker' {rayinternals.ACTOR_ARGS_RESTART_WARNING}.\nI other\n"
        )
    assert mark.path == log, "this process's file, not another driver's"
    assert mark.count(rayinternals.ACTOR_ARGS_RESTART_WARNING) == 1
    monkeypatch.setattr(logs, "session_logs_dir", lambda: None)
    assert logs.DriverLog().count("anything") == 0, "no Ray: nothing to count"
