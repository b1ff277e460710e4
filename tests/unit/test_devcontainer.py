""".devcontainer/devcontainer.json, the course in a GitHub Codespace: it parses (JSON with comments), every
command it runs is a ./build.sh command README.md gives and build.sh accepts, and JupyterLab's port is
forwarded from the address ``./build.sh lab`` listens on, with what a Codespace's forwarding needs."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.checkout import REPO_ROOT

DEVCONTAINER = REPO_ROOT / ".devcontainer" / "devcontainer.json"
# Every lifecycle property the dev container spec runs a command from.
COMMAND_KEYS = (
    "initializeCommand",
    "onCreateCommand",
    "updateContentCommand",
    "postCreateCommand",
    "postStartCommand",
    "postAttachCommand",
)


def strip_comments(text: str) -> str:
    """JSON with comments (devcontainer.json's JSONC) as plain JSON: ``//`` and ``/* */`` comments
    outside strings dropped; a ``//`` inside a string (a URL) stays."""
    out, i, in_string = [], 0, False
    while i < len(text):
        char = text[i]
        if in_string:
            out.append(char)
            if char == "\\":
                out.append(text[i + 1])
                i += 1
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
            out.append(char)
        elif text.startswith("//", i):
            i = text.find("\n", i)
            i = len(text) if i == -1 else i
            continue
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            if end == -1:
                raise ValueError("an unclosed /* comment")
            i = end + 2
            continue
        else:
            out.append(char)
        i += 1
    return "".join(out)


def _config() -> dict[str, Any]:
    return json.loads(strip_comments(DEVCONTAINER.read_text()))


def _commands(config: dict[str, Any]) -> list[str]:
    """Each command the container runs: a string, an exec-form list, or an object of either (run in parallel)."""
    found = []
    for key in COMMAND_KEYS:
        value = config.get(key)
        for command in value.values() if isinstance(value, dict) else [value] if value else []:
            found.append(" ".join(command) if isinstance(command, list) else command)
    return found


def _build_sh_commands() -> set[str]:
    """The commands build.sh's dispatch accepts (its ``case "$cmd" in`` labels)."""
    build = (REPO_ROOT / "build.sh").read_text()
    dispatch = build[build.index('case "$cmd" in') : build.rindex("esac")]
    return set(re.findall(r"^\s+(\w+)\)", dispatch, re.M))


def test_comments_are_stripped_and_strings_kept():
    text = '{\n  // a comment\n  "url": "http://x//y", /* another */ "n": 1, "q": "a \\" // b"\n}'
    assert json.loads(strip_comments(text)) == {"url": "http://x//y", "n": 1, "q": 'a " // b'}


def test_it_parses_and_sets_up_with_build_sh():
    config = _config()
    assert config["postCreateCommand"] == "./build.sh setup"
    assert config["image"].startswith("mcr.microsoft.com/devcontainers/python:") and "3.12" in config["image"]
    assert "3.12" in (REPO_ROOT / "build.sh").read_text().split("PYTHONS=", 1)[1].splitlines()[0]


def test_every_command_is_a_build_sh_command_the_readme_gives_and_build_sh_accepts():
    commands = _commands(_config())
    assert commands, "the dev container runs no command"
    readme = (REPO_ROOT / "README.md").read_text()
    accepted = _build_sh_commands()
    assert {"setup", "lab"} <= accepted
    for command in commands:
        match = re.fullmatch(r"\./build\.sh (\w+)", command)
        assert match, f"{command!r}: the dev container runs only ./build.sh commands"
        assert match[1] in accepted, f"{command!r}: build.sh has no command {match[1]!r}"
        assert command in readme, (
            f"{command!r} is not in README.md: a learner should see what the Codespace ran"
        )


def test_jupyterlab_s_port_is_forwarded_with_a_label_on_a_machine_big_enough():
    config = _config()
    assert 8888 in config["forwardPorts"]
    assert "JupyterLab" in config["portsAttributes"]["8888"]["label"]
    assert (
        "--ServerApp.ip=127.0.0.1" in (REPO_ROOT / "build.sh").read_text()
    )  # a Codespace forwards localhost
    hardware = config["hostRequirements"]
    assert hardware["cpus"] >= 4 and int(hardware["memory"].removesuffix("gb")) >= 8
    assert {"ms-python.python", "ms-toolsai.jupyter"} <= set(config["customizations"]["vscode"]["extensions"])


@pytest.mark.parametrize("codespace", [True, False])
def test_lab_in_a_codespace_accepts_the_forwarded_host_and_opens_no_local_file(tmp_path: Path, codespace):
    """In a Codespace the browser arrives as https://<name>-8888.app.github.dev: Jupyter must accept that
    Host while still listening on 127.0.0.1, and print its link rather than open a local file."""
    fake = tmp_path / "bin" / "jupyter"
    fake.parent.mkdir()
    fake.write_text('#!/bin/sh\nfor a in "$@"; do echo "$a"; done\n')
    fake.chmod(0o755)
    script = f"""source <(sed '/^cmd=/,$d' {REPO_ROOT / "build.sh"})
VENV={tmp_path}; ROOT={REPO_ROOT}; setup() {{ :; }}
lab
"""
    env = {"PATH": "/usr/bin:/bin", **({"CODESPACES": "true"} if codespace else {})}
    run = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60, env=env)
    assert run.returncode == 0, run.stderr
    args = run.stdout.splitlines()
    assert "lab" in args and "--ServerApp.ip=127.0.0.1" in args
    for wanted in ("--ServerApp.allow_remote_access=True", "--no-browser"):
        assert (wanted in args) is codespace, wanted
