import pytest
from ray.train import ScalingConfig

from course_utils import session


def test_worker_count_bounds():
    assert session.worker_count_bounds(2) == (2, 2)
    assert session.worker_count_bounds((1, 3)) == (1, 3)


@pytest.mark.parametrize("bad", [(4, 2), (0, 2), (1, 2, 3), 0])
def test_worker_count_bounds_rejects_bad_ranges(bad):
    with pytest.raises(ValueError):
        session.worker_count_bounds(bad)


def test_elastic_range_error_says_what_to_do():
    with pytest.raises(ValueError) as info:
        session.worker_count_bounds((4, 2))
    assert "min <= max" in str(info.value)


@pytest.fixture
def two_cpu_cluster(monkeypatch):
    import ray

    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 2.0, "memory": 1e9})


def test_check_resources_accepts_what_fits(two_cpu_cluster):
    session.check_resources(ScalingConfig(num_workers=2), global_batch=128)


def test_too_many_workers_is_a_clear_error(two_cpu_cluster):
    with pytest.raises(session.ResourceError) as info:
        session.check_resources(ScalingConfig(num_workers=8))
    message = str(info.value)
    assert "8 worker(s)" in message and "has 2 CPU" in message and "at most 2" in message


def test_gpu_request_on_cpu_cluster_is_a_clear_error(two_cpu_cluster):
    with pytest.raises(session.ResourceError) as info:
        session.check_resources(ScalingConfig(num_workers=1, use_gpu=True))
    assert "GPU" in str(info.value) and "use_gpu=False" in str(info.value)


def test_elastic_needs_only_its_minimum(two_cpu_cluster):
    session.check_resources(ScalingConfig(num_workers=(1, 4)), global_batch=128)


def test_uneven_batch_is_caught_before_the_run(two_cpu_cluster):
    with pytest.raises(ValueError, match="does not split evenly"):
        session.check_resources(ScalingConfig(num_workers=(1, 3)), global_batch=100)


def test_state_queries_need_ray():
    import ray

    if ray.is_initialized():
        pytest.skip("another test left Ray running in this process")
    with pytest.raises(RuntimeError, match="start_ray"):
        session.alive_actors()


def test_state_api_without_dashboard_is_a_clear_error(monkeypatch):
    import ray
    import ray._private.worker as ray_worker

    monkeypatch.setattr(ray, "is_initialized", lambda: True)
    monkeypatch.setattr(ray_worker, "get_dashboard_url", lambda: "")
    with pytest.raises(session.StateApiUnavailable, match="dashboard"):
        session.train_actors()
