"""Where the course is published, written into the lessons: their links and install cell.

pyproject.toml's ``[tool.course]`` names the GitHub repository and branch the course is published
from. From that one setting come the "Open in Colab" and "GitHub Codespace" links (README's learning
path, the top of every lesson, hence its site page) and the source every lesson's install cell
installs ``course_utils`` from. ``./build.sh export`` writes the links and the install cell into the
notebooks (``sync``); ``export --check`` and tests/unit/test_install.py fail when they drift. What the
install cell calls when it runs (``installed_summary``) ships with the course: ``course_utils.core.install``.
"""

from __future__ import annotations

import json
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

from course_utils.core.config import REPO_ROOT

# The variable that points a lesson's install cell at another source (a fork, a wheel: file:///...).
SOURCE_ENV = "COURSE_SOURCE"
INSTALL_CELL_ID = "install"
LINKS_PREFIX = "**Open in** "


@dataclass(frozen=True)
class Publication:
    """The GitHub repository (``owner/name``) and branch the course is published from."""

    repository: str
    branch: str

    def colab_url(self, notebook: str) -> str:
        """Colab opening ``notebooks/<notebook>`` of the branch, straight from GitHub."""
        return f"https://colab.research.google.com/github/{self.repository}/blob/{self.branch}/notebooks/{notebook}"

    def codespaces_url(self) -> str:
        """GitHub's page that creates a Codespace of the branch (.devcontainer/devcontainer.json),
        or resumes the learner's own (``quickstart``)."""
        return f"https://codespaces.new/{self.repository}/tree/{self.branch}?quickstart=1"

    def page_url(self, path: str) -> str:
        """A file of the repository on GitHub at the branch (a lesson's link to ``docs/gpu.md``: it
        opens from Colab, JupyterLab and the site alike)."""
        return f"https://github.com/{self.repository}/blob/{self.branch}/{path}"

    def source(self) -> str:
        """What a lesson's install cell gives pip: the course at the branch the lesson came from."""
        return f"git+https://github.com/{self.repository}@{self.branch}"

    def links(self, notebook: str) -> str:
        """The line under a lesson's title: where else it opens."""
        return f"{LINKS_PREFIX}[Colab]({self.colab_url(notebook)}) · [GitHub Codespaces]({self.codespaces_url()})"


def publication(pyproject: Path = REPO_ROOT / "pyproject.toml") -> Publication:
    """The ``[tool.course]`` setting of the checkout's pyproject.toml."""
    setting = tomllib.loads(pyproject.read_text())["tool"]["course"]
    if not re.fullmatch(r"[\w.-]+/[\w.-]+", setting["repository"]):
        raise ValueError(f"[tool.course] repository = {setting['repository']!r} is not owner/name")
    return Publication(repository=setting["repository"], branch=setting["branch"])


def install_cell(pub: Publication) -> str:
    """The source of every lesson's first code cell: the same text in each lesson, 8 lines of code
    (``COURSE_SOURCE`` names another branch, a fork or a wheel; docs/hosting.md).

    pip's ``--report=-`` (its JSON on stdout) says what came, (coloured: ipykernel sets ``FORCE_COLOR=1``
    for its subprocesses, which pip's JSON printer obeys over ``--no-color``; ``installed_summary`` reads past it); ``-qq`` keeps its warnings to itself
    (on Colab, which runs as root: "Running pip as the 'root' user"), its errors still come, and
    ``installed_summary`` counts them into its one line."""
    return f'''\
# Colab, a notebook alone: installs course_utils (minutes, one line). A clone: nothing.
import importlib.util, os, subprocess, sys

if importlib.util.find_spec("course_utils") is None:
    github = "{pub.source()}"
    source = os.getenv("{SOURCE_ENV}", github)
    pip = [sys.executable, "-m", "pip", "install", "-qq", "--report=-"]
    ran = subprocess.run([*pip, f"course_utils @ {{source}}"], capture_output=True)
    assert not ran.returncode, f"pip could not install {{source}}:\\n{{ran.stderr.decode()}}"
    print(importlib.import_module("course_utils.core.install").installed_summary(ran))'''


def _source_lines(text: str) -> list[str]:
    """``text`` as a saved notebook cell's ``source``: one string per line, each but the last with its newline."""
    return text.splitlines(keepends=True)


def _lessons(notebooks: Path) -> list[Path]:
    return sorted(notebooks.glob("[0-9][0-9]_*.ipynb"))


def _expected(cells: list[dict], notebook: str, pub: Publication) -> tuple[list[str], str]:
    """(the title cell's lines with the links line in place, the install cell's source)."""
    title = "".join(cells[0]["source"]).split("\n")
    lines = [line for line in title if "https://colab.research.google.com/" not in line]
    while len(lines) > 1 and lines[1] == "" and lines[2:3] == [""]:
        del lines[1]
    lines[1:1] = ["", pub.links(notebook)]
    return lines, install_cell(pub)


def sync(
    notebooks: Path = REPO_ROOT / "notebooks", *, write: bool, pub: Publication | None = None
) -> list[str]:
    """Put the links line under each lesson's title and the install cell after it (``write``), or
    only list what differs from ``pyproject.toml``'s setting. Returns one line per lesson that
    differed (written, or still to write)."""
    pub = pub or publication()
    drifted = []
    for path in _lessons(notebooks):
        nb = json.loads(path.read_text())
        cells = nb["cells"]
        lines, source = _expected(cells, path.name, pub)
        title = "\n".join(lines)
        has_cell = len(cells) > 1 and cells[1].get("id") == INSTALL_CELL_ID
        if "".join(cells[0]["source"]) == title and has_cell and "".join(cells[1]["source"]) == source:
            continue
        drifted.append(
            f"{path.name}: the Colab/Codespace links or the install cell differ from [tool.course]"
        )
        if not write:
            continue
        cells[0]["source"] = _source_lines(title)
        cell = {
            "cell_type": "code",
            "execution_count": None,
            "id": INSTALL_CELL_ID,
            "metadata": {},
            "outputs": [],
            "source": _source_lines(source),
        }
        if has_cell:
            cells[1] = cell
        else:
            cells.insert(1, cell)
        path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
    return drifted
