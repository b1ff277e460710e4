import pytest
from ray.train import ScalingConfig

from course_utils.core import session
from course_utils.internals import dashboard


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
        dashboard.alive_actors()


def test_state_api_without_dashboard_is_a_clear_error(monkeypatch):
    import ray

    monkeypatch.setattr(ray, "is_initialized", lambda: True)
    monkeypatch.setattr(dashboard, "dashboard_url", lambda: None)
    with pytest.raises(dashboard.StateApiUnavailable, match="dashboard"):
        dashboard.train_actors()


class _Context:
    """What ray.init returns, as far as dashboard_url reads it."""

    def __init__(self, dashboard_url):
        self.dashboard_url = dashboard_url


class _Runtime:
    gcs_address = "127.0.0.1:6379"


def test_dashboard_url_comes_from_what_ray_init_returned(monkeypatch):
    import ray

    monkeypatch.setattr(ray, "is_initialized", lambda: True)
    monkeypatch.setattr(ray, "get_runtime_context", lambda: _Runtime())
    monkeypatch.setattr(dashboard, "_ray_context", ("127.0.0.1:6379", _Context("127.0.0.1:8265")))
    assert dashboard.dashboard_url() == "http://127.0.0.1:8265"
    monkeypatch.setattr(dashboard, "_ray_context", ("127.0.0.1:6379", _Context("")))
    assert dashboard.dashboard_url() is None, "ray.init's context without a dashboard (no ray[default])"
    monkeypatch.setattr(dashboard, "_ray_context", ("10.0.0.1:6379", _Context("10.0.0.1:8265")))
    assert dashboard.dashboard_url() is None, (
        "a context from an earlier Ray in this process is not this one's"
    )


# --- Token authentication (Ray 2.59+): the header for the dashboard's HTTP API ------------------


@pytest.fixture
def token_sources(tmp_path, monkeypatch):
    """No token anywhere (a fresh HOME), token auth on as a local ray.init() sets it."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    monkeypatch.delenv("RAY_AUTH_TOKEN_PATH", raising=False)
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    return tmp_path


def _bearer() -> str | None:
    return dashboard.auth_headers().get("Authorization")


def test_the_token_comes_from_rays_three_places_in_rays_order(token_sources, monkeypatch):
    default = token_sources / "home" / ".ray" / "auth_token"
    assert dashboard.auth_token() == (None, str(default)) and _bearer() is None
    default.parent.mkdir(parents=True)
    default.write_text("from-the-default-file\n")  # written by hand, with a newline
    assert _bearer() == "Bearer from-the-default-file"
    named = token_sources / "cluster-token"
    named.write_text("from-the-named-file")
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(named))
    assert _bearer() == "Bearer from-the-named-file", "RAY_AUTH_TOKEN_PATH before ~/.ray/auth_token"
    monkeypatch.setenv("RAY_AUTH_TOKEN", "from-the-variable")
    assert _bearer() == "Bearer from-the-variable", "RAY_AUTH_TOKEN before both files"
    assert dashboard.auth_token() == ("from-the-variable", "RAY_AUTH_TOKEN")


def test_a_named_token_file_that_is_missing_is_not_replaced_by_the_default(token_sources, monkeypatch):
    default = token_sources / "home" / ".ray" / "auth_token"
    default.parent.mkdir(parents=True)
    default.write_text("the-default")
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(token_sources / "missing"))
    assert dashboard.auth_token() == (None, f"RAY_AUTH_TOKEN_PATH={token_sources / 'missing'}"), (
        "as Ray: no fallback"
    )


def test_no_token_is_sent_where_this_process_does_not_use_token_auth(token_sources, monkeypatch):
    monkeypatch.setenv("RAY_AUTH_TOKEN", "secret")
    monkeypatch.delenv("RAY_AUTH_MODE")
    assert dashboard.auth_headers() == {}, "a cluster without token auth never receives the token"
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    assert dashboard.auth_headers() == {}


class _Answer:
    def __init__(self, body: bytes):
        self.body = body

    def read(self):
        return self.body

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_open_dashboard_sends_the_bearer_header(token_sources, monkeypatch):
    import urllib.request

    seen = []

    def answer(request, timeout):
        seen.append((request.full_url, request.get_header("Authorization")))
        return _Answer(b"{}")

    monkeypatch.setenv("RAY_AUTH_TOKEN", "abc")
    monkeypatch.setattr(urllib.request, "urlopen", answer)
    assert dashboard.open_dashboard("http://127.0.0.1:8265/api/version") == b"{}"
    assert seen == [("http://127.0.0.1:8265/api/version", "Bearer abc")]


@pytest.mark.parametrize(
    ("code", "body", "says"),
    [
        (401, "Unauthorized: Missing authentication token", "found no token"),
        (403, "Forbidden: Invalid authentication token", "which the cluster does not accept"),
    ],
)
def test_a_refused_token_says_where_the_course_looked_and_how_to_get_it(
    token_sources, monkeypatch, code, body, says
):
    import io
    import urllib.error
    import urllib.request

    def refuse(request, timeout):
        raise urllib.error.HTTPError(request.full_url, code, "refused", {}, io.BytesIO(body.encode()))

    if code == 403:
        monkeypatch.setenv("RAY_AUTH_TOKEN", "not-the-clusters")
    monkeypatch.setattr(urllib.request, "urlopen", refuse)
    with pytest.raises(dashboard.DashboardAuthError) as err:
        dashboard.open_dashboard("http://127.0.0.1:8265/api/train/v2/runs/v1")
    message = str(err.value)
    assert f"answered {code}" in message and says in message
    assert "RAY_AUTH_TOKEN" in message and "RAY_AUTH_TOKEN_PATH" in message and ".ray/auth_token" in message
    assert "ray get-auth-token" in message


def test_a_403_about_something_else_is_not_an_auth_error(token_sources, monkeypatch):
    import io
    import urllib.error
    import urllib.request

    text = "You can change this by setting RAY_DASHBOARD_ENABLE_PROFILING=1 on the Ray head node."

    def refuse(request, timeout):
        raise urllib.error.HTTPError(request.full_url, 403, "Forbidden", {}, io.BytesIO(text.encode()))

    monkeypatch.setattr(urllib.request, "urlopen", refuse)
    with pytest.raises(dashboard.DashboardHTTPError) as err:
        dashboard.open_dashboard("http://127.0.0.1:8265/worker/traceback?pid=1")
    assert err.value.code == 403 and "RAY_DASHBOARD_ENABLE_PROFILING=1" in str(err.value)


def test_a_driver_refused_for_want_of_a_token_is_told_what_to_set(token_sources, monkeypatch):
    """Ray 2.60 wraps the refusal: ConnectionError from a RuntimeError whose text carries the
    AuthenticationError's traceback (as seen on a LocalCluster)."""
    import ray

    def refuse(**kwargs):
        try:
            raise RuntimeError(
                "Failed to connect to GCS. Last connection error: Traceback (most recent call last):\n"
                "ray.exceptions.AuthenticationError: RPC error: InvalidAuthToken: Authentication token is missing"
            )
        except RuntimeError as inner:
            raise ConnectionError("Failed to connect to Ray cluster at 10.0.0.1:6379") from inner

    monkeypatch.delenv("RAY_AUTH_MODE")
    monkeypatch.setattr(ray, "init", refuse)
    with pytest.raises(ConnectionError) as err:
        session._connect("10.0.0.1:6379", {}, {})
    message = str(err.value)
    assert "uses token authentication" in message and "RAY_AUTH_MODE=<unset>" in message
    assert "export RAY_AUTH_MODE=token" in message and "ray get-auth-token" in message


def test_a_driver_with_token_auth_on_but_no_token_is_told_what_to_set(token_sources, monkeypatch):
    """A host whose home has no token (a worker host in tests/hosts_tier): Ray raises its own
    AuthenticationError before it connects; the course says what to set instead."""
    import ray

    def no_token(**kwargs):
        raise ray.exceptions.AuthenticationError(
            "Token authentication is enabled but no authentication token was found."
        )

    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    monkeypatch.setattr(ray, "init", no_token)
    with pytest.raises(ConnectionError) as err:
        session._connect("10.0.0.1:6379", {}, {})
    assert "uses token authentication" in str(err.value) and "no token (RAY_AUTH_TOKEN unset" in str(
        err.value
    )


def test_a_driver_that_cannot_connect_for_another_reason_keeps_rays_error(monkeypatch):
    import ray

    def down(**kwargs):
        raise ConnectionError("Failed to connect to Ray cluster at 10.0.0.1:6379")

    monkeypatch.setattr(ray, "init", down)
    with pytest.raises(ConnectionError, match="^Failed to connect"):
        session._connect("10.0.0.1:6379", {}, {})


@pytest.mark.parametrize(
    ("config", "slots", "left", "words"),
    [
        (
            ScalingConfig(num_workers=2),
            4,
            2,
            "4 (LOCAL_MIN_CPUS = 4 on a laptop): 2 for the 2 training worker(s), 2 for Ray Data",
        ),
        # A 16-core GPU node: workers take GPUs, not CPU slots (it read "training workers 0" before).
        (
            ScalingConfig(num_workers=1, use_gpu=True),
            16,
            16,
            "The 1 training worker(s) take 1 GPU and no CPU slot each, so Ray Data has 16",
        ),
        (
            ScalingConfig(num_workers=2, use_gpu=True, resources_per_worker={"CPU": 2, "GPU": 1}),
            16,
            12,
            "take 1 GPU and 2 CPU slot(s) each, so Ray Data has 12",
        ),
    ],
)
def test_cpu_split_says_what_the_training_workers_take(config, slots, left, words):
    got_left, sentence = session.cpu_split(config, cpu_slots=slots)
    assert got_left == left and words in sentence, sentence
    assert "training workers 0" not in sentence


GIB = 2**30


@pytest.fixture
def disk(monkeypatch):
    """A disk of 100 GiB whose free space the test sets; no threshold of the learner's."""
    import collections
    import shutil

    from course_utils.internals import rayinternals

    monkeypatch.delenv(rayinternals.DISK_THRESHOLD_ENV, raising=False)
    usage = collections.namedtuple("usage", "total used free")
    state = {"free": 50 * GIB}
    monkeypatch.setattr(
        shutil, "disk_usage", lambda path: usage(100 * GIB, 100 * GIB - state["free"], state["free"])
    )
    return state


def test_a_disk_under_rays_limit_changes_nothing(disk, tmp_path):
    disk["free"] = 6 * GIB  # 94% used
    assert session.disk_guard(tmp_path / "ray") == ({}, None)


def test_a_disk_over_rays_limit_with_room_keeps_the_headroom_and_says_so(disk, tmp_path):
    from course_utils.internals import rayinternals

    disk["free"] = 4 * GIB  # 96% used, more than the 3 GiB the course keeps
    guard, note = session.disk_guard(tmp_path / "ray" / "not-yet")
    assert guard == {rayinternals.DISK_THRESHOLD_ENV: "0.9700"}  # stops at 3 GiB free
    assert "96.0% full, 4.0 GB free of 100.0 GB" in note and "keeps the last 3.0 GB free" in note


def test_a_disk_with_less_than_the_headroom_keeps_rays_guard_and_says_free_space(disk, tmp_path):
    disk["free"] = 1 * GIB
    guard, note = session.disk_guard(tmp_path)
    assert guard == {} and "99.0% full" in note and "free some space on that disk first" in note


def test_the_learners_own_threshold_wins(disk, tmp_path, monkeypatch):
    from course_utils.internals import rayinternals

    disk["free"] = 4 * GIB
    monkeypatch.setenv(rayinternals.DISK_THRESHOLD_ENV, "0.95")
    assert session.disk_guard(tmp_path) == ({}, None)
