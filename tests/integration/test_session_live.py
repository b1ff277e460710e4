"""session.start_ray against a real local Ray: the worker setup hook runs in every worker without a
job runtime_env (which would start each worker through a second Python, setup_worker.py)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.integration


def test_local_workers_run_the_setup_hook_without_a_runtime_env(ray_session):
    import ray

    @ray.remote(num_cpus=0)
    def inside() -> dict:
        import os
        import threading

        return {
            "runtime_env": dict(ray.get_runtime_context().runtime_env),
            "ray_address": os.environ.get("RAY_ADDRESS"),
            "excepthook_replaced": threading.excepthook is not threading.__excepthook__,
        }

    if ray_session.connected_to_existing:
        pytest.skip("a RAY_ADDRESS cluster gets the hook through the job's runtime_env")
    seen = ray.get(inside.remote())
    assert seen["runtime_env"] == {}, seen
    # What course_utils.logs.setup_worker does first: the worker names its own cluster.
    assert seen["ray_address"] == ray.get_runtime_context().gcs_address, seen
    assert seen["excepthook_replaced"], seen
