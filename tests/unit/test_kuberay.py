"""deploy/kuberay.yaml starts the cluster the hosts tier runs: the same environment on the head, the workers
and the learners' JupyterLab, the same CPU slots, the token from a Secret (tests/hosts.RECIPE)."""

from __future__ import annotations

import yaml

from maintainer_tools.harness import hosts
from tests.checkout import REPO_ROOT

SECRET = "from-a-Secret"


def _env(container: dict) -> dict[str, str]:
    return {e["name"]: e["value"] if "value" in e else SECRET for e in container.get("env", [])}


def _cluster() -> dict:
    return yaml.safe_load((REPO_ROOT / "deploy" / "kuberay.yaml").read_text())


def _containers(group: dict) -> dict[str, dict]:
    return {c["name"]: c for c in group["template"]["spec"]["containers"]}


def test_head_and_workers_run_the_recipes_environment_and_slots():
    spec = _cluster()["spec"]
    head_env, head_argv = hosts.recipe_command("head", head_ip="x", slots="1")
    worker_env, worker_argv = hosts.recipe_command(
        "worker", token=SECRET, head_ip="x", worker_ip="y", slots="2"
    )
    head = _containers(spec["headGroupSpec"])["ray-head"]
    (workers,) = spec["workerGroupSpecs"]
    worker = _containers(workers)["ray-worker"]
    # On the head the Secret stands for the token file `ray get-auth-token --generate` writes on a host.
    assert _env(head) == {**head_env, "RAY_AUTH_TOKEN": SECRET}
    assert _env(worker) == worker_env  # RAY_AUTH_TOKEN from the Secret, as the recipe gives it to a host
    # KubeRay itself passes --head/--address, --port=6379 and --node-ip-address (the pod's IP); the rest of
    # the recipe's `ray start` flags are the groups' rayStartParams.
    own = ("--head", "--port=", "--address=", "--node-ip-address=")
    for group, argv in ((spec["headGroupSpec"], head_argv), (workers, worker_argv)):
        params = [f"--{key}={value}" for key, value in group["rayStartParams"].items()]
        assert params == [a for a in argv[2:] if not a.startswith(own)]
    assert workers["replicas"] == hosts.Hosts().workers
    assert spec["rayVersion"] == _ray_pin()


def test_the_learners_jupyterlab_has_the_recipes_learner_variables():
    spec = _cluster()["spec"]
    lab = _containers(spec["headGroupSpec"])["jupyterlab"]
    learner_env, _ = hosts.recipe_command(
        "learner",
        strict=False,
        head_ip="127.0.0.1",
        token=SECRET,
        bucket="<bucket>",
        prefix="<prefix>",
        endpoint="http://<minio>:9000",
        key=SECRET,
        secret=SECRET,
    )
    assert _env(lab) == learner_env
    assert lab["command"][:2] == ["./build.sh", "lab"]


def _ray_pin() -> str:
    for line in (REPO_ROOT / "requirements.txt").read_text().splitlines():
        if line.startswith("ray["):
            return line.split("==")[1].strip()
    raise AssertionError("requirements.txt pins no ray")
