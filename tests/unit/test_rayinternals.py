"""Each Ray internal the course relies on (course_utils/internals/rayinternals.py) is still where the course
expects it, and no other course module uses a private Ray name.

A failure here names the internal that moved: fix it in course_utils/internals/rayinternals.py (and the Ray
versions in its docstring), not in the module that uses it.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import inspect
import logging
import re
from pathlib import Path

import pytest

from course_utils.internals import rayinternals

ROOT = Path(__file__).resolve().parents[2]
PRIVATE = re.compile(r"ray\._private|ray\._common|_internal")
SEE = "see course_utils/internals/rayinternals.py"


def _module(name: str):
    assert importlib.util.find_spec(name) is not None, f"Ray module {name} moved in Ray {_version()}: {SEE}"
    return importlib.import_module(name)


def _version() -> str:
    import ray

    return ray.__version__


def _source(name: str) -> str:
    spec = importlib.util.find_spec(name)
    assert spec is not None and spec.origin, f"Ray module {name} moved in Ray {_version()}: {SEE}"
    return Path(spec.origin).read_text()


def test_only_rayinternals_names_private_ray_modules():
    """`grep -rnE "ray\\._private|_internal" course_utils` finds rayinternals.py alone."""
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in sorted((ROOT / "course_utils").rglob("*.py"))
        if path.name != "rayinternals.py"
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if PRIVATE.search(line)
    ]
    assert not found, (
        "private Ray names outside course_utils/internals/rayinternals.py (move them there):\n"
        + "\n".join(found)
    )


def test_the_token_auth_notice_comes_from_the_logger_the_course_quiets(monkeypatch):
    module = _module(rayinternals.TOKEN_AUTH_SETUP_LOGGER)
    assert module.logger.name == rayinternals.TOKEN_AUTH_SETUP_LOGGER, (
        f"Ray's token-auth set-up logs on {module.logger.name!r} in Ray {_version()}: {SEE}"
    )
    assert "Token authentication is enabled for this Ray cluster" in inspect.getsource(module), (
        f"Ray {_version()} reworded or moved its token-auth notice: {SEE}"
    )
    logger = logging.getLogger(rayinternals.TOKEN_AUTH_SETUP_LOGGER)
    monkeypatch.setattr(logger, "level", logger.level)  # restored after the test
    rayinternals.quiet_token_auth_notice()
    assert not logger.isEnabledFor(logging.WARNING) and logger.isEnabledFor(logging.ERROR)


def test_workers_read_the_setup_hook_from_the_variable_the_course_sets():
    name = rayinternals.worker_setup_hook_env_var()
    assert name == "__RAY_WORKER_PROCESS_SETUP_HOOK_ENV_VAR", f"Ray {_version()} renamed it: {SEE}"
    worker = _source("ray._private.workers.default_worker")
    assert "os.getenv(\n        ray_constants.WORKER_PROCESS_SETUP_HOOK_ENV_VAR" in worker, (
        f"default_worker.py no longer reads WORKER_PROCESS_SETUP_HOOK_ENV_VAR from its environment in Ray {_version()}: {SEE}"
    )


@pytest.mark.parametrize("name", rayinternals.TRAIN_PATH_NAMED_LOGGERS)
def test_the_train_loggers_named_by_their_file_still_are(name):
    module = _module(name)
    assert module.logger.name == module.__file__, (
        f"{name}'s logger is {module.logger.name!r} in Ray {_version()}, no longer its file: "
        f"course_utils.internals.logs need not re-route it any more; {SEE}"
    )


def test_the_placement_group_cleaner_logger_and_thread():
    module = _module(rayinternals.TRAIN_CLEANER_LOGGER)
    assert module.logger.name == rayinternals.TRAIN_CLEANER_LOGGER, f"moved in Ray {_version()}: {SEE}"
    assert f'name="{rayinternals.TRAIN_CLEANER_THREAD}"' in inspect.getsource(module), (
        f"Ray Train's {rayinternals.TRAIN_CLEANER_THREAD} thread was renamed in Ray {_version()}: {SEE}"
    )


@pytest.mark.parametrize(("name", "starts"), rayinternals.TRAIN_HELPER_MESSAGES.items())
def test_the_helper_messages_filed_as_info(name, starts):
    module = _module(name)
    assert module.logger.name == name, f"{name}'s logger moved in Ray {_version()}: {SEE}"
    for start in starts:
        assert start in inspect.getsource(module), f"{start!r} reworded in Ray {_version()}: {SEE}"


def test_the_wrapper_frame_that_calls_the_training_function():
    util = _module("ray.train.v2._internal.util")
    assert hasattr(util, "construct_train_func"), (
        f"ray.train.v2 construct_train_func moved in Ray {_version()}: {SEE}"
    )
    wrapped = util.construct_train_func(lambda config: None, {}, contextlib.nullcontext)
    assert wrapped.__code__.co_qualname == rayinternals.TRAIN_FN_ENTRY, (
        f"Ray Train's wrapper frame is {wrapped.__code__.co_qualname!r} in Ray {_version()}: {SEE}"
    )


def test_the_report_barrier_actor_and_its_warning():
    name = "ray.train.v2._internal.execution.checkpoint.sync_actor"
    module = _module(name)
    assert hasattr(module, rayinternals.TRAIN_SYNC_ACTOR_CLASS), f"{name} moved in Ray {_version()}: {SEE}"
    assert rayinternals.TRAIN_BARRIER_WARNING in inspect.getsource(module), (
        f"Ray Train's barrier warning was reworded in Ray {_version()}: {SEE}"
    )


def test_the_elastic_policys_decision_lines():
    source = _source("ray.train.v2._internal.execution.scaling_policy.elastic")
    for phrase in (
        rayinternals.ELASTIC_START_DECISION,
        rayinternals.ELASTIC_RESIZE_DECISION,
        "resources for {num_workers} workers",
        "-> {num_workers} workers",
    ):
        assert phrase in source, (
            f"the elastic policy's line {phrase!r} was reworded in Ray {_version()}: {SEE}"
        )


def test_the_split_coordinator_and_its_warning():
    name = "ray.data._internal.iterator.stream_split_iterator"
    module = _module(name)
    assert hasattr(module, rayinternals.SPLIT_COORDINATOR_CLASS), (
        f"{name} SplitCoordinator moved in Ray {_version()}: {SEE}"
    )
    assert rayinternals.SPLIT_WARNING in inspect.getsource(module), (
        f"Ray Data's split warning was reworded in Ray {_version()}: {SEE}"
    )
    assert module.BLOCKED_CLIENT_WARN_TIMEOUT == 30, "lesson 03 and docs/going-further.md say 30 s"


def test_the_autoscaling_coordinator_the_elastic_demo_refreshes():
    name = "ray.data._internal.cluster_autoscaler.default_autoscaling_coordinator"
    module = _module(name)
    actor = getattr(module, "_AutoscalingCoordinatorActor", None)
    assert actor is not None, f"{name}._AutoscalingCoordinatorActor moved in Ray {_version()}: {SEE}"
    assert callable(getattr(actor, "_tick", None)), (
        f"ray.data AutoscalingCoordinator._tick moved in Ray {_version()}: {SEE}"
    )
    assert actor.TICK_INTERVAL_S == rayinternals.AUTOSCALING_COORDINATOR_REFRESH_S, (
        f"the coordinator refreshes every {actor.TICK_INTERVAL_S} s in Ray {_version()}: {SEE}"
    )
    create = inspect.getsource(module.get_or_create_autoscaling_coordinator)
    assert f'name="{rayinternals.AUTOSCALING_COORDINATOR_NAME}"' in create, (
        f"renamed in Ray {_version()}: {SEE}"
    )
    assert f'namespace="{rayinternals.AUTOSCALING_COORDINATOR_NAMESPACE}"' in create, (
        f"moved in Ray {_version()}: {SEE}"
    )


def test_the_coordinator_every_fit_asks_for_resources_and_its_short_timeout():
    """start_autoscaling_coordinator creates the actor Train V2's controller asks, with a 5 s timeout,
    at the start of every fit; the course creates it first so that request finds it up."""
    name = "ray.data._internal.cluster_autoscaler.default_autoscaling_coordinator"
    module = _module(name)
    assert callable(getattr(module, "get_or_create_autoscaling_coordinator", None)), (
        f"{name}.get_or_create_autoscaling_coordinator moved in Ray {_version()}: {SEE}"
    )
    client = "ray.train.v2._internal.execution.scaling_policy.autoscaling_coordinator_client"
    source = _source(client)
    assert "get_or_create_autoscaling_coordinator()" in source, (
        f"Ray Train's controller no longer asks the autoscaling coordinator in Ray {_version()}: {SEE}"
    )
    timeout = re.search(r"AUTOSCALING_REQUESTS_GET_TIMEOUT_S = (\d+)", source)
    assert timeout and int(timeout.group(1)) <= 30, (
        f"the controller's wait for the coordinator changed in Ray {_version()} "
        f"({timeout and timeout.group(0)}): is the warm-up still needed? {SEE}"
    )


def test_ray_datas_log_level_variable_and_progress_logger(monkeypatch):
    logging_module = _module("ray.data._internal.logging")
    monkeypatch.setenv(rayinternals.DATA_LOG_LEVEL_ENV, "WARNING")
    logging_module.configure_logging()
    try:
        assert logging.getLogger("ray.data").level == logging.WARNING, (
            f"Ray {_version()}'s configure_logging no longer reads {rayinternals.DATA_LOG_LEVEL_ENV}: {SEE}"
        )
    finally:
        monkeypatch.delenv(rayinternals.DATA_LOG_LEVEL_ENV)
        logging_module.configure_logging()
    progress = _module(rayinternals.DATA_PROGRESS_LOGGER)
    assert "Progress bars disabled" in inspect.getsource(progress) and progress.logger.name == (
        rayinternals.DATA_PROGRESS_LOGGER
    ), f"Ray {_version()} warns about disabled progress bars elsewhere: {SEE}"


def test_the_core_workers_actor_arguments_line_and_the_driver_log_name():
    import ray

    raylet_so = next(Path(ray.__file__).parent.glob("_raylet*.so"))
    assert rayinternals.ACTOR_ARGS_RESTART_WARNING.encode() in raylet_so.read_bytes(), (
        f"the core worker's actor-arguments line was reworded in Ray {_version()} (lesson 05 counts it): {SEE}"
    )
    assert rayinternals.driver_log_prefix() == "python-core-driver", f"renamed in Ray {_version()}: {SEE}"


def test_the_driver_failure_signal_handler_switch():
    import ray
    from ray._private import ray_constants

    assert isinstance(getattr(ray_constants, "RAY_DISABLE_FAILURE_SIGNAL_HANDLER", None), bool), (
        f"ray_constants.RAY_DISABLE_FAILURE_SIGNAL_HANDLER moved in Ray {_version()}: {SEE}"
    )
    raylet_so = next(Path(ray.__file__).parent.glob("_raylet*.so"))
    assert b"RAY_DISABLE_FAILURE_SIGNAL_HANDLER" in raylet_so.read_bytes(), (
        f"the core worker no longer reads the switch in Ray {_version()} (quiet_driver_stop_stack): {SEE}"
    )


def test_the_raylets_disk_guard_setting_and_its_line(monkeypatch, tmp_path):
    import ray

    raylet = (Path(ray.__file__).parent / "core" / "src" / "ray" / "raylet" / "raylet").read_bytes()
    name = rayinternals.DISK_THRESHOLD_ENV.removeprefix("RAY_").encode()
    assert name in raylet, f"the raylet no longer has the {name!r} setting in Ray {_version()}: {SEE}"
    assert rayinternals.DISK_FULL_LINE.encode() in raylet, (
        f"the raylet's disk-full line was reworded in Ray {_version()}: {SEE}"
    )
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path))
    assert rayinternals.default_temp_dir() == str(tmp_path / "ray"), f"moved in Ray {_version()}: {SEE}"


def test_abseils_mutex_trace_is_skipped_by_the_drivers_deduplicators(monkeypatch):
    from ray._private import ray_logging

    for name in ("stdout_deduplicator", "stderr_deduplicator"):
        deduplicator = getattr(ray_logging, name, None)
        assert deduplicator is not None and hasattr(deduplicator, "skip_re"), (
            f"ray._private.ray_logging.{name} moved in Ray {_version()} (skip_abseil_mutex_trace): {SEE}"
        )
        monkeypatch.setattr(deduplicator, "skip_re", re.compile("a learner's own"))
    rayinternals.skip_abseil_mutex_trace()
    rayinternals.skip_abseil_mutex_trace()  # twice in one kernel: the pattern once
    deduplicator = ray_logging.stderr_deduplicator
    assert deduplicator.skip_re.pattern.count("mutex") == 1
    trace = [
        "[mutex.cc : 452] RAW: Lock blocking 0x560237fc8440   @ 0x7f458fc2b1a2 0x7f458ecfb23c",
        "[mutex.cc : 452] RAW: Lock returning 0x560237fc8440   @ 0x7f458fc2b1a2",
        "[mutex.cc : 452] RAW: Unlock 0x55613d29fdd0   @ 0x7f458fc2b1a2",
        "a learner's own noise",
    ]
    real = [
        "[mutex.cc : 1384] RAW: Potential Mutex deadlock: ",
        "[mutex.cc : 452] RAW: Check failed: deadlock",
        "ValueError: Lock blocking 0x1",
    ]
    batch = {
        "ip": "10.0.0.1",
        "pid": 11912,
        "task_name": "ReadParquet",
        "is_err": True,
        "lines": trace + real,
    }
    printed = [line for out in deduplicator.deduplicate(batch) for line in out["lines"]]
    assert printed == real, f"Ray {_version()} no longer drops lines by skip_re: {SEE}"
