"""The course's documents: a README a learner reads in two minutes, one document per other reader,
links that resolve, no development log outside CHANGELOG.md, and a generated benchmarks page."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from maintainer_tools.bench import report
from maintainer_tools.bench.common import COMMANDS
from maintainer_tools.run_course import MAIN_PATH_LIMIT_MIN
from tests.checkout import REPO_ROOT

README = REPO_ROOT / "README.md"
DOCS = REPO_ROOT / "docs"
READERS = ["hosting.md", "gpu.md", "troubleshooting.md", "going-further.md", "benchmarks.md", "design.md"]
DOCUMENTS = sorted([README, REPO_ROOT / "CONTRIBUTING.md", REPO_ROOT / "CHANGELOG.md", *DOCS.glob("*.md")])
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^)\s]+)\)")
ISSUE = re.compile(r"(?i)\bissues? #?\d+")
HASH = re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b")
# a commit cited in code or a notebook: "at 8138cad", "commit b8e4c92" (a notebook's cell ids are hex too)
CITED_COMMIT = re.compile(r"(?i)\b(?:at|commit|since|before|after)\s+`?" + HASH.pattern)
DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")
# GitHub's own pages relative to a file at the repository's top: the CI badges
GITHUB_RELATIVE = re.compile(r"^\.\./\.\./actions/workflows/([\w.-]+\.yml)(?:/badge\.svg)?$")


def words(markdown: str) -> list[str]:
    """The words a reader reads: link targets and markup dropped, code kept."""
    text = re.sub(r"\]\([^)]*\)", "]", markdown)
    return [w for w in text.split() if re.search(r"[A-Za-z0-9]", w)]


def slug(heading: str) -> str:
    """GitHub's anchor for a Markdown heading (the site's MkDocs toc makes the same for these)."""
    text = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip().lower())
    return re.sub(r"\s", "-", re.sub(r"[^\w\s-]", "", text))


def anchors(path: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    return {slug(m[1]) for m in re.finditer(r"^#{1,6} (.+)$", text, flags=re.M)}


def test_readme_is_a_learner_page_of_at_most_600_words_naming_lesson_01_early():
    text = README.read_text()
    found = words(text)
    assert len(found) <= 600, f"README.md has {len(found)} words; at most 600 (move the rest into docs/)"
    assert len(text.split()) <= 600, f"README.md has {len(text.split())} whitespace-separated tokens"
    first = next(i for i, w in enumerate(found) if "01_single_gpu_baseline" in w)
    assert first < 150, f"README.md names lesson 01 at word {first}; a learner should meet it within 150"
    assert "./build.sh lab" in " ".join(found[:first])
    for command in ("./build.sh course", "./build.sh test", "./build.sh clean"):
        assert command in text


def test_readme_gives_the_learning_path_and_links_every_document():
    text = README.read_text()
    lessons = sorted(p.name for p in (REPO_ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    rows = [line for line in text.splitlines() if line.startswith("| [")]
    assert [re.search(r"\((notebooks/[^)]+)\)", row)[1] for row in rows] == [
        f"notebooks/{n}" for n in lessons
    ]
    for row, lesson in zip(rows, lessons, strict=True):
        what, minutes, main, rest = (cell.strip() for cell in row.strip("|").split("|")[1:5])
        assert len(words(what)) <= 20, f"learning path: {what!r} is over 20 words"
        assert float(minutes) > 0
        # reading minutes: counted on executed lessons by one rule (tests/executed/test_reading_time.py)
        assert 0 < int(main) <= MAIN_PATH_LIMIT_MIN and int(rest) > 0, (
            f"{lesson}: {main} + {rest} reading minutes"
        )
    for target in [*(f"docs/{name}" for name in READERS), "CONTRIBUTING.md", "CHANGELOG.md", "LICENSE"]:
        assert f"]({target})" in text, f"README.md does not link {target}"
    for workflow in ("ci.yml", "canary.yml", "gpu.yml"):
        assert f"actions/workflows/{workflow}/badge.svg" in text, f"README.md has no {workflow} badge"


def test_every_reader_has_a_document():
    for name in READERS:
        assert (DOCS / name).is_file(), f"docs/{name} is missing"
    for name in ("CONTRIBUTING.md", "CHANGELOG.md", "LICENSE"):
        assert (REPO_ROOT / name).is_file(), f"{name} is missing"
    license_text = (REPO_ROOT / "LICENSE").read_text()
    assert "Apache License" in license_text and "Version 2.0, January 2004" in license_text
    assert "END OF TERMS AND CONDITIONS" in license_text
    changelog = (REPO_ROOT / "CHANGELOG.md").read_text()
    assert changelog.startswith("# Changelog") and "keepachangelog.com" in changelog
    assert "## [Unreleased]" in changelog


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_every_link_resolves(document: Path):
    broken = []
    for target in LINK.findall(re.sub(r"```.*?```", "", document.read_text(), flags=re.S)):
        if re.match(r"^[a-z]+:", target):
            continue  # https:, mailto:
        path, _, anchor = target.partition("#")
        github = GITHUB_RELATIVE.match(path)
        if github and document.parent == REPO_ROOT:
            if not (REPO_ROOT / ".github" / "workflows" / github[1]).is_file():
                broken.append(f"{target}: no such workflow")
            continue
        resolved = (document.parent / path).resolve() if path else document
        if not resolved.is_relative_to(REPO_ROOT) or not resolved.exists():
            broken.append(f"{target}: no such file")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(f"{target}: no heading with that anchor in {resolved.name}")
    assert not broken, f"{document.relative_to(REPO_ROOT)}: links that do not resolve: {broken}"


@pytest.mark.parametrize(
    "document",
    [d for d in DOCUMENTS if d.name != "CHANGELOG.md"],
    ids=lambda p: str(p.relative_to(REPO_ROOT)),
)
def test_no_document_but_the_changelog_is_a_development_log(document: Path):
    """Issue numbers, commit hashes and the dates of work sessions belong in CHANGELOG.md: a reader
    elsewhere cannot use them. The benchmarks page's one header line carries its measurement date."""
    lines = document.read_text().splitlines()
    if document.name == "benchmarks.md":
        lines = [line for line in lines if not line.startswith("Measured on ")]
    text = "\n".join(lines)
    found = ISSUE.findall(text) + HASH.findall(text) + DATE.findall(text)
    assert not found, f"{document.relative_to(REPO_ROOT)} names {found}: move that history to CHANGELOG.md"


def _tracked_sources() -> list[Path]:
    files = subprocess.run(["git", "ls-files"], cwd=REPO_ROOT, capture_output=True, text=True, check=True)
    skip = ("tests/", "CHANGELOG.md", "LICENSE", "requirements.lock")
    return [
        REPO_ROOT / name
        for name in files.stdout.splitlines()
        if not name.startswith(skip) and (REPO_ROOT / name).is_file() and not name.endswith(".md")
    ]


def test_no_file_outside_the_changelog_and_tests_names_an_issue_or_cites_a_commit():
    found = []
    for path in _tracked_sources():
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        if path.suffix == ".ipynb":  # the cells' text, not their ids
            text = "\n".join("".join(cell["source"]) for cell in json.loads(text)["cells"])
        for pattern in (ISSUE, CITED_COMMIT):
            found += [f"{path.relative_to(REPO_ROOT)}: {m.group(0)!r}" for m in pattern.finditer(text)]
    assert not found, "issue numbers or commits outside CHANGELOG.md and tests/:\n  " + "\n  ".join(found)


def test_the_checks_catch_what_they_look_for():
    assert ISSUE.findall("as issue 22 asked; Issues 21 and 22") == ["issue 22", "Issues 21"]
    assert HASH.findall("at 8138cad, not 12345678 nor deadbeef") == ["8138cad"]
    assert CITED_COMMIT.search("smoke here, `./build.sh course` at 8138cad")
    assert words("[a link](docs/a-very/long/target.md) and `code`") == ["[a", "link]", "and", "`code`"]
    assert slug("Where a fit's start-up goes (`bench startup`)") == "where-a-fits-start-up-goes-bench-startup"


def test_lesson_04s_lost_machine_figures_are_the_recorded_ones():
    """Lesson 04 quotes the hosts bench (a figure no lesson cell can measure: it needs three
    machines); the seconds it states are pinned.json's, rounded, so a re-record updates the lesson."""
    figures = report.load()["benches"]["hosts"]["figures"]
    cells = json.loads((REPO_ROOT / "notebooks" / "04_fault_tolerance.ipynb").read_text())["cells"]
    text = next(
        "".join(c["source"]) for c in cells if "`hosts` bench in `docs/benchmarks.md`" in "".join(c["source"])
    )
    sentence = text[text.index("A real machine that goes mid-fit") :].split("\n\n")[0]
    stated = [int(s) for s in re.findall(r"(\d+) s\b", sentence)]
    recorded = [
        round(figures[k]) for k in ("kill_to_first_step_s", "link_cut_to_first_step_s", "link_cut_noticed_s")
    ]
    assert stated == recorded, f"lesson 04 says {stated} s, pinned.json has {recorded} s: update the sentence"


def test_benchmarks_page_is_generated_from_pinned_json():
    assert (DOCS / "benchmarks.md").read_text() == report.render(report.load()), (
        "docs/benchmarks.md differs from maintainer_tools/bench/pinned.json: run ./build.sh benchmarks "
        "(never edit the page by hand; `python -m maintainer_tools.bench record <bench>` re-measures one)"
    )
    pinned = report.load()
    assert set(pinned["benches"]) == set(COMMANDS)
    page = (DOCS / "benchmarks.md").read_text()
    header = [line for line in page.splitlines() if line.startswith("Measured on ")]
    assert len(header) == 1 and "Ray " in header[0] and DATE.search(header[0])
    for name in COMMANDS:
        assert f"\n## {name}\n" in page


def test_record_stores_a_bench_s_figures_output_and_machine(tmp_path, monkeypatch):
    pinned = tmp_path / "pinned.json"
    pinned.write_text(json.dumps({**report.load(), "benches": {"train": {"ray": "0", "figures": {}}}}))
    fake = tmp_path / "fake.py"
    fake.write_text(
        "print('\\x1b[36m(RayTrainWorker pid=1)\\x1b[0m warming up')\nprint('plain_images_per_s: 222.5')\nprint('best_layout: 2x1')\nprint('ratio: 0.640')\n"
    )

    class Popen(subprocess.Popen):
        def __init__(self, command, **kwargs):
            super().__init__([command[0], str(fake)], **kwargs)

    monkeypatch.setattr(report.subprocess, "Popen", Popen)
    entry = report.record("train", ["--epochs", "2"], pinned)
    assert entry["figures"] == {"plain_images_per_s": 222.5, "ratio": 0.64}
    assert entry["output"] == [
        "plain_images_per_s: 222.5",
        "best_layout: 2x1",
        "ratio: 0.640",
    ]  # no Ray log line
    assert entry["command"] == "python -m maintainer_tools.bench train --epochs 2"
    assert "CPU cores" in entry["machine"] and DATE.fullmatch(entry["measured"])
    assert json.loads(pinned.read_text())["benches"]["train"] == entry
    page = report.render(json.loads(pinned.read_text()))
    assert "| `ratio` | 0.64 |" in page and "The bench also printed:" in page and "best_layout: 2x1" in page


def test_build_sh_usage_points_to_the_right_documents():
    run = subprocess.run([str(REPO_ROOT / "build.sh"), "no-such-command"], capture_output=True, text=True)
    assert run.returncode == 2
    assert "README.md" in run.stdout and "CONTRIBUTING.md" in run.stdout
    for command in ("docs", "benchmarks"):
        assert command in run.stdout.splitlines()[0]
