"""The course's documentation site: README, docs/ and the executed lessons as one static site.

``./build.sh docs`` (``python -m maintainer_tools.docsite``) stages the pages in ``build/site-src`` the way
the repository lays them out (README.md at the top, docs/, notebooks/), so every relative link that
works on GitHub works on the site too, then runs MkDocs (``mkdocs.yml``: Material theme,
mkdocs-jupyter for the lessons) into ``build/site``. The site asks nothing of the internet: no web
fonts, no CDN scripts. Each lesson page is its executed copy, with a "download this notebook" link.

Executed lessons come from ``./build.sh course`` (``build/notebooks``) or, failing that, from the
test run's lesson items (``build/tests/lessons``), whose appended cells with the published
solutions are dropped: the site shows each lesson as shipped, exercises unanswered.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from course_utils.core.config import REPO_ROOT, build_root
from maintainer_tools.answered import ANSWERED_HEADING
from maintainer_tools.run_course import lessons

PAGES = ("README.md", "CONTRIBUTING.md", "CHANGELOG.md")  # the repository's own pages, beside docs/
PACKAGE_MAP_PAGE = "course-utils.md"  # course_utils/README.md on the site, among the guides
LESSON_LINK = re.compile(r"\]\((\d\d_[a-z0-9_]+)\.ipynb(#[^)]*)?\)")
HEADING = re.compile(r"^#{1,6} .*$", re.M)
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"


class SiteError(RuntimeError):
    """The site cannot be built: says what is missing and the command that makes it."""


def executed_lessons(root: Path = REPO_ROOT) -> dict[str, Path]:
    """Each lesson's newest executed copy: ``./build.sh course``'s or the test run's.

    Raises ``SiteError`` naming the lessons that have none."""
    build = root / "build"
    names = [lesson.name for lesson in lessons(root=root)]
    found: dict[str, Path] = {}
    for name in names:
        copies = [
            d / name for d in (build / "notebooks", build / "tests" / "lessons") if (d / name).is_file()
        ]
        if copies:
            found[name] = max(copies, key=lambda p: p.stat().st_mtime)
    missing = [n for n in names if n not in found]
    if missing:
        raise SiteError(
            f"no executed copy of {', '.join(missing)}: the site shows each lesson with its outputs. "
            "Run ./build.sh course first (about 10 minutes on 2 cores), then ./build.sh docs."
        )
    return found


def _progress_html(state: dict[str, Any], model_id: str) -> str | None:
    """A tqdm progress widget (an HBox of text, a progress bar, text) as static HTML, from the widget
    state the kernel saved: its final text and fill, with no widget JavaScript to load."""
    box = state.get(model_id, {}).get("state", {})
    children = [c.removeprefix("IPY_MODEL_") for c in box.get("children", [])]
    if not children:
        return None
    parts = []
    for child in children:
        model = state.get(child, {})
        values = model.get("state", {})
        if model.get("model_name", "").endswith("ProgressModel"):
            top = values.get("max") or 1
            parts.append(f'<progress value="{values.get("value", 0)}" max="{top}"></progress>')
        elif "value" in values:
            parts.append(f"<span>{values['value']}</span>")  # an HTML widget's value is HTML already
    return '<div class="course-progress">' + " ".join(parts) + "</div>"


def static_notebook(nb: Any, name: str) -> Any:
    """``nb`` as the site shows it: a link that downloads it (``name``) first, then the lesson as
    shipped (the test run's appended, answered exercises dropped), links to other lessons pointing at
    their pages, and progress widgets as static HTML, so the page loads no widget scripts."""
    import nbformat

    cells = list(nb.cells)
    for i, cell in enumerate(cells):
        if cell.cell_type == "markdown" and "".join(cell.source).startswith(ANSWERED_HEADING):
            cells = cells[:i]
            break
    for cell in cells:
        if cell.cell_type == "markdown":  # a link to another lesson opens its page, not a download
            cell.source = LESSON_LINK.sub(r"](\1.html\2)", "".join(cell.source))
            # mkdocs-jupyter's table of contents drops a heading's `code`, so its anchor would miss the
            # heading's id: headings lose their backticks on the site
            cell.source = HEADING.sub(lambda m: m.group(0).replace("`", ""), cell.source)
    download = nbformat.v4.new_markdown_cell(
        f'<a href="{name}" download>Download this notebook</a> (outputs included) and run it yourself: '
        "[Start](../index.html#start) says how."
    )
    nb.cells = [download, *cells]
    state = nb.metadata.get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            view = output.get("data", {}).get(WIDGET_VIEW)
            if view is None:
                continue
            rendered = _progress_html(state, view.get("model_id", ""))
            data = {"text/plain": output["data"].get("text/plain", "")}
            if rendered:
                data["text/html"] = rendered
            output["data"] = data
    nb.metadata.pop("widgets", None)
    return nb


def _site_links(text: str) -> str:
    """The page as the site shows it: links to LICENSE (a file without a page) point at its staged page,
    LICENSE.md; the CI badges go (their ``../../actions/...`` links resolve on GitHub only)."""
    text = re.sub(r"^\[!\[[^\]]*\]\(\.\./\.\./actions/[^)]*\)\]\([^)]*\)\n", "", text, flags=re.M)
    return re.sub(r"\]\(((?:\.\./)*)LICENSE\)", r"](\1LICENSE.md)", text)


def stage(root: Path = REPO_ROOT, out: Path | None = None) -> Path:
    """Copy the site's pages into ``out`` (default ``build/site-src``), laid out as in the repository."""
    import nbformat

    out = out or build_root() / "site-src"
    lessons = executed_lessons(root)
    if out.exists():
        shutil.rmtree(out)
    (out / "docs").mkdir(parents=True)
    (out / "notebooks").mkdir()
    for name in PAGES:
        (out / name).write_text(_site_links((root / name).read_text()))
    license_text = (root / "LICENSE").read_text()
    (out / "LICENSE.md").write_text("# License\n\n```text\n" + license_text + "\n```\n")
    for page in sorted((root / "docs").glob("*.md")):
        (out / "docs" / page.name).write_text(_site_links(page.read_text()))
    # The learner's map of course_utils (JupyterLab shows it when the folder is opened), as a guide page.
    (out / "docs" / PACKAGE_MAP_PAGE).write_text((root / "course_utils" / "README.md").read_text())
    for name, path in lessons.items():
        nb = static_notebook(nbformat.read(str(path), as_version=4), name)
        nbformat.write(nb, str(out / "notebooks" / name))
    (out / "assets").mkdir()
    (out / "assets" / "course.css").write_text(
        ".course-progress { display: flex; gap: .5em; align-items: center; font-family: monospace; }\n"
    )
    return out


def nav_pages(root: Path = REPO_ROOT) -> list[str]:
    """The site's pages as ``mkdocs.yml``'s navigation lists them, as paths of the built site."""
    import yaml

    def walk(entry: Any) -> list[str]:
        if isinstance(entry, str):
            return [entry]
        if isinstance(entry, dict):
            return [p for value in entry.values() for p in walk(value)]
        return [p for item in entry for p in walk(item)]

    config = yaml.load((root / "mkdocs.yml").read_text(), Loader=yaml.BaseLoader)
    pages = walk(config["nav"])
    return ["index.html" if p == "README.md" else re.sub(r"\.(md|ipynb)$", ".html", p) for p in pages]


def build(root: Path = REPO_ROOT, *, strict: bool = True) -> Path:
    """Stage the pages and run MkDocs; return the site's folder (``build/site``)."""
    stage(root)
    site = build_root() / "site"
    command = [sys.executable, "-m", "mkdocs", "build", "--quiet", "--config-file", str(root / "mkdocs.yml")]
    if strict:
        command.append("--strict")  # a broken link or a missing page fails the build
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}  # Material's end-of-life banner, printed on every build
    run = subprocess.run(command, cwd=root, capture_output=True, text=True, env=env)
    if run.returncode != 0:
        raise SiteError(f"mkdocs build failed:\n{run.stdout}{run.stderr}")
    return site


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="./build.sh docs", description=__doc__.split("\n")[0])
    parser.parse_args(argv)
    try:
        site = build()
    except SiteError as exc:
        print(f"docs: {exc}", file=sys.stderr)
        raise SystemExit(1) from None
    pages = sum(1 for _ in site.rglob("*.html")) - 1  # 404.html is not a page
    print(f"docs: built {pages} pages into {site}; open {site / 'index.html'}")


if __name__ == "__main__":
    main()
