"""docs/hosting.md's multi-machine commands are the ones the hosts tier runs (tests/hosts.RECIPE)."""

from __future__ import annotations

import re

import pytest

from maintainer_tools.harness import hosts
from tests.checkout import REPO_ROOT


def _recipe_block() -> list[str]:
    text = (REPO_ROOT / "docs" / "hosting.md").read_text()
    section = text[text.index("## A cluster of several machines") :]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    return [line.removeprefix("export ") for line in block.splitlines() if line and not line.startswith("#")]


def test_hosting_md_shows_exactly_the_tiers_commands():
    assert _recipe_block() == [hosts.RECIPE[k] for k in ("token", "head", "worker", "learner")]


def test_a_recipe_command_fills_its_placeholders_and_splits_env_from_argv():
    env, argv = hosts.recipe_command(
        "worker", token="t0k", head_ip="10.1.2.2", worker_ip="10.1.2.3", slots="2"
    )
    assert env == {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "t0k"}  # Ray's defaults and the token
    assert argv == ["ray", "start", "--address=10.1.2.2:6379", "--node-ip-address=10.1.2.3", "--num-cpus=2"]
    with pytest.raises(ValueError, match="placeholder"):
        hosts.recipe_command("head", head_ip="10.1.2.2")  # <slots> left


def test_the_tier_adds_only_foreground_and_no_usage_stats_to_a_node():
    tier = hosts.Hosts()
    tier.token = "t0k"
    root = REPO_ROOT / "build"
    tier.hosts = [
        hosts.Host("head", "ns0", "v0", "10.1.2.2", root, private=False),
        hosts.Host("worker1", "ns1", "v1", "10.1.2.3", root, private=True),
    ]
    for host, kind in ((tier.hosts[0], "head"), (tier.hosts[1], "worker")):
        env, argv = tier.node_command(host)
        values = {
            "head_ip": "10.1.2.2",
            "slots": str(tier.head_slots if kind == "head" else tier.worker_slots),
        }
        if kind == "worker":
            values.update(token="t0k", worker_ip="10.1.2.3")
        want_env, want_argv = hosts.recipe_command(kind, **values)
        assert env == want_env
        assert [argv[0].rsplit("/", 1)[-1], *argv[1:]] == [*want_argv, *hosts.TIER_ONLY_FLAGS]
