"""One publication setting (pyproject's [tool.course]) behind every Colab/Codespaces link and install cell,
the install cell itself, pyproject's dependency ranges, and the folders of a course installed on its own."""

from __future__ import annotations

import io
import json
import re
import tomllib
import zipfile
from contextlib import redirect_stdout
from importlib.metadata import version
from pathlib import Path

import nbformat
import pytest
from packaging.requirements import Requirement

from course_utils.core import config, install
from course_utils.core.install import normalise
from maintainer_tools import docsite, publish
from maintainer_tools.run_course import lessons
from tests.checkout import REPO_ROOT

LESSONS = lessons()
PUB = publish.publication()


def _pins() -> dict[str, str]:
    """``{name: version}`` of every ``==`` pin in the requirements files the checkout installs."""
    pins = {}
    for path in REPO_ROOT.glob("requirements*.txt"):
        for line in path.read_text().splitlines():
            line = line.split("#")[0].strip()
            if "==" in line:
                req = Requirement(line)
                pins[normalise(req.name)] = next(iter(req.specifier)).version
    return pins


def test_the_setting_names_a_repository_and_a_branch_and_builds_the_urls():
    assert re.fullmatch(r"[\w.-]+/[\w.-]+", PUB.repository) and PUB.branch
    url = PUB.colab_url("01_single_gpu_baseline.ipynb")
    assert url == (
        f"https://colab.research.google.com/github/{PUB.repository}/blob/{PUB.branch}"
        "/notebooks/01_single_gpu_baseline.ipynb"
    )
    assert PUB.codespaces_url().startswith(f"https://codespaces.new/{PUB.repository}/tree/{PUB.branch}")
    assert PUB.source() == f"git+https://github.com/{PUB.repository}@{PUB.branch}"


def test_a_bad_repository_setting_is_refused(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.course]\nrepository = "no-slash"\nbranch = "main"\n')
    with pytest.raises(ValueError, match="owner/name"):
        publish.publication(tmp_path / "pyproject.toml")


@pytest.mark.parametrize("lesson", LESSONS, ids=[lesson.name[:2] for lesson in LESSONS])
def test_each_lesson_opens_with_its_links_then_the_install_cell(lesson: Path):
    cells = json.loads(lesson.read_text())["cells"]
    title = "".join(cells[0]["source"]).splitlines()
    assert title[0].startswith("# ") and title[1] == "" and title[2] == PUB.links(lesson.name)
    assert cells[1]["id"] == publish.INSTALL_CELL_ID
    assert "".join(cells[1]["source"]) == publish.install_cell(PUB)
    assert f'"{PUB.source()}"' in publish.install_cell(PUB)


def test_sync_finds_no_drift_and_rewrites_a_drifted_lesson(tmp_path):
    assert publish.sync(write=False) == []
    copy = tmp_path / LESSONS[0].name
    copy.write_text(LESSONS[0].read_text())
    other = publish.Publication("someone/fork", "release")
    assert publish.sync(tmp_path, write=False, pub=other) == [
        f"{copy.name}: the Colab/Codespace links or the install cell differ from [tool.course]"
    ]
    publish.sync(tmp_path, write=True, pub=other)
    cells = json.loads(copy.read_text())["cells"]
    assert other.links(copy.name) in "".join(cells[0]["source"])
    assert PUB.colab_url(copy.name) not in "".join(cells[0]["source"])  # replaced, not added
    assert '"git+https://github.com/someone/fork@release"' in "".join(cells[1]["source"])
    assert len(cells) == len(json.loads(LESSONS[0].read_text())["cells"])
    assert publish.sync(tmp_path, write=False, pub=other) == []


def test_readme_links_every_lesson_to_colab_and_offers_a_codespace():
    readme = (REPO_ROOT / "README.md").read_text()
    for lesson in LESSONS:
        assert PUB.colab_url(lesson.name) in readme, lesson.name
    assert PUB.codespaces_url() in readme
    found = set(re.findall(r"https://colab\.research\.google\.com/[^)\s]+", readme))
    assert found == {PUB.colab_url(lesson.name) for lesson in LESSONS}, "a Colab link not from the setting"


def test_the_site_page_of_a_lesson_keeps_its_links():
    nb = docsite.static_notebook(nbformat.read(str(LESSONS[0]), as_version=4), LESSONS[0].name)
    assert PUB.links(LESSONS[0].name) in nb.cells[1].source


def test_the_install_cell_does_nothing_in_a_checkout():
    out = io.StringIO()
    with redirect_stdout(out):
        exec(publish.install_cell(PUB), {})
    assert out.getvalue() == ""


def test_the_install_cell_says_what_pip_said_when_it_fails(monkeypatch, tmp_path):
    import importlib.util

    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    monkeypatch.setenv(publish.SOURCE_ENV, (tmp_path / "missing.whl").as_uri())
    with pytest.raises(AssertionError, match=r"pip could not install file://.*missing\.whl:\nERROR: "):
        exec(publish.install_cell(PUB), {})


def test_the_install_cell_is_8_lines_of_code():
    code = [
        line for line in publish.install_cell(PUB).splitlines() if line.strip() and not line.startswith("#")
    ]
    assert len(code) <= 8, "\n".join(code)


def test_the_summary_counts_what_pip_reported_and_says_torch_stayed():
    import json
    import subprocess

    report = {
        "install": [
            {"metadata": {"name": "ray", "version": "2.60.0"}},
            {"metadata": {"name": "course_utils", "version": "9"}},
            {"metadata": {"name": "torchvision", "version": "0.29.1"}},
        ]
    }
    run = subprocess.CompletedProcess(
        [], 0, json.dumps(report).encode(), b"\x1b[31mERROR: something\x1b[0m\n"
    )
    line = install.installed_summary(run)
    assert line.startswith(
        f"Installed course_utils {version('course_utils')} with 2 package(s) it needs (ray 2.60.0); "
        f"kept this runtime's torch {version('torch')};"
    ), line
    assert "installed torchvision 0.29.1 (this runtime had none in the course's range)" in line
    assert line.endswith("pip said 1 line(s) on stderr, first: ERROR: something.")
    quiet = install.installed_summary(subprocess.CompletedProcess([], 0, json.dumps(report).encode(), b""))
    assert "pip said" not in quiet


def test_pyprojects_ranges_hold_the_versions_ci_runs():
    """Every dependency a lesson alone installs admits the version requirements.txt pins (what CI
    runs); Ray and the speed pins are the same exact versions."""
    dependencies = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    pins = _pins()
    for line in dependencies:
        req = Requirement(line)
        name = normalise(req.name)
        assert name in pins, f"{name} is a dependency of the package but not pinned in requirements.txt"
        assert req.specifier.contains(pins[name], prereleases=True), f"{line} excludes CI's {pins[name]}"
        if name in ("ray", "jsonschema", "torchdata"):
            assert str(req.specifier) == f"=={pins[name]}", line
    assert "ray" in {normalise(Requirement(d).name) for d in dependencies}


def test_outside_a_checkout_the_course_writes_beside_the_notebook(monkeypatch, tmp_path):
    monkeypatch.delenv("COURSE_DATA", raising=False)
    monkeypatch.delenv("COURSE_STORAGE", raising=False)
    assert config.in_checkout() and config.course_home() == REPO_ROOT
    monkeypatch.setattr(config, "REPO_ROOT", tmp_path / "site-packages")
    monkeypatch.chdir(tmp_path)
    assert not config.in_checkout()
    assert config.data_root() == tmp_path / "data"
    assert config.storage_root() == str(tmp_path / "storage")
    assert config.build_root() == tmp_path / "build"


@pytest.fixture(scope="module")
def wheel_files(tmp_path_factory) -> list[str]:
    """The files of the learner's wheel, built from this checkout as the Colab tier builds it."""
    from maintainer_tools.harness import colab

    return zipfile.ZipFile(colab.build_wheel(tmp_path_factory.mktemp("wheel"))).namelist()


def test_the_learners_wheel_holds_no_maintainers_tool(wheel_files):
    packages = {
        name.rsplit("/", 1)[0] for name in wheel_files if not name.split("/")[0].endswith(".dist-info")
    }
    assert packages, wheel_files
    assert not [p for p in packages if p.split("/")[0] == "maintainer_tools"], (
        "maintainer_tools is in the wheel"
    )
    assert not [p for p in packages if p.startswith("course_utils/bench")], "the benches are in the wheel"
    tools = ("canary", "run_course", "export", "docsite", "answered", "publish", "cluster")
    shipped_tools = [n for n in wheel_files if n.rsplit("/", 1)[-1] in {f"{tool}.py" for tool in tools}]
    assert not shipped_tools, f"maintainers' tools in the learner's wheel: {shipped_tools}"
    # and the wheel holds what the lessons import: every package of course_utils in the checkout
    on_disk = {
        str(p.parent.relative_to(REPO_ROOT))
        for p in (REPO_ROOT / "course_utils").rglob("__init__.py")
        if "__pycache__" not in p.parts
    }
    assert on_disk <= packages, (
        f"packages of course_utils missing from the wheel: {sorted(on_disk - packages)}"
    )
    assert {"course_utils/core/install.py", "course_utils/lesson04/elastic.py"} <= set(wheel_files)


def test_the_solutions_ship_in_the_package(monkeypatch, tmp_path, wheel_files):
    names = wheel_files
    shipped = sorted(n.rsplit("/", 1)[1] for n in names if n.startswith("course_utils/_solutions/"))
    assert shipped == sorted(p.name for p in (REPO_ROOT / "notebooks" / "solutions").glob("*.md"))
    from course_utils.exercises import checks

    assert checks.solutions_dir() == REPO_ROOT / "notebooks" / "solutions"
    monkeypatch.setattr(checks, "REPO_ROOT", tmp_path)
    assert checks.solutions_dir() == Path(checks.__file__).resolve().parents[1] / "_solutions"


@pytest.mark.parametrize("lesson", LESSONS, ids=[lesson.name[:2] for lesson in LESSONS])
def test_each_lesson_links_the_gpu_page_through_the_setting(lesson: Path):
    text = lesson.read_text()
    assert PUB.page_url("docs/gpu.md") in text, f"{lesson.name} mentions GPUs without linking docs/gpu.md"
    for url in re.findall(r"https://github\.com/[^)\s\"\\]+/blob/[^)\s\"\\]+", text):
        path = url.removeprefix(PUB.page_url(""))
        assert url.startswith(PUB.page_url("")), f"{lesson.name}: {url} is not built from [tool.course]"
        assert (REPO_ROOT / path).is_file(), f"{lesson.name}: {url} names no file of the repository"


def test_the_summary_reads_a_report_pip_coloured():
    """In a Jupyter kernel ipykernel sets FORCE_COLOR=1, and pip prints its --report=- JSON in colour."""
    import subprocess

    coloured = b'\x1b[1m{\x1b[0m\n  \x1b[1;34m"install"\x1b[0m: \x1b[1m[\x1b[0m{\x1b[1;34m"metadata"\x1b[0m: '
    coloured += b'{"name": "ray", "version": "2.60.0"}}]}'
    line = install.installed_summary(subprocess.CompletedProcess([], 0, coloured, b""))
    assert "with 1 package(s) it needs (ray 2.60.0)" in line, line
