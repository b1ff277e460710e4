"""The documentation site, built as ``./build.sh docs`` builds it and read in Chromium.

The build (``maintainer_tools.docsite.build``: MkDocs in strict mode, so a broken link or anchor fails it)
takes the lessons executed earlier in the same ``./build.sh test`` run (``build/tests/lessons``;
this module runs last, ``conftest.py``), or ``./build.sh course``'s copies. Then a local HTTP server
on 127.0.0.1 serves ``build/site`` and Chromium opens every page the site's navigation and links
reach, checking that:

- every page loads (HTTP 200, its article rendered);
- every internal link resolves (pages, the lessons' downloadable notebooks, anchors on the page);
- every lesson page shows its plots (decoded ``<img>`` elements, at least as many as the executed
  notebook has ``image/png`` outputs) and a link that downloads the notebook;
- no request leaves the machine (no CDN fonts or scripts), as ``tests/browser`` checks JupyterLab.
"""

from __future__ import annotations

import functools
import http.server
import json
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urldefrag

import pytest

from maintainer_tools import docsite
from maintainer_tools.harness.chromium import browser, chromium, nonlocal_requests  # noqa: F401 (browser, chromium: fixtures)
from maintainer_tools.harness.notebook_runs import DOCS_SITE

pytestmark = [pytest.mark.site, pytest.mark.path(DOCS_SITE)]

# Runs in the page: what a reader sees, and where its links go.
PAGE_JS = """() => {
  const article = document.querySelector('article');
  const imgs = article ? [...article.querySelectorAll('img')] : [];
  return {
    title: document.title,
    article: article ? article.innerText.length : 0,
    links: [...document.querySelectorAll('a[href]')].map(a => a.href),
    images: imgs.length,
    decoded: imgs.filter(i => i.complete && i.naturalWidth > 0).length,
    ids: [...document.querySelectorAll('[id]')].map(e => e.id),
    downloads: [...document.querySelectorAll('a[download], a[href$=".ipynb"]')].map(a => a.href),
  };
}"""


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:  # the test reports what failed; no access log on stderr
        pass


class _Server(http.server.ThreadingHTTPServer):
    def handle_error(self, request, client_address) -> None:
        """A page the browser left before a file finished is not an error; anything else is raised."""
        import sys

        if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            super().handle_error(request, client_address)


@pytest.fixture(scope="module")
def served() -> Iterator[str]:
    """The site, built now, served from 127.0.0.1 on a free port."""
    try:
        root = docsite.build()
    except docsite.SiteError as exc:
        pytest.fail(str(exc), pytrace=False)
    handler = functools.partial(_Quiet, directory=str(root))
    server = _Server(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


def _png_outputs(notebook: Path) -> int:
    nb = json.loads(notebook.read_text())
    return sum(
        "image/png" in output.get("data", {}) for cell in nb["cells"] for output in cell.get("outputs", [])
    )


def _status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def test_every_page_loads_links_resolve_and_lessons_show_plots(served, browser):  # noqa: F811
    context = browser.new_context()
    requests: list[str] = []
    context.on("request", lambda r: requests.append(r.url))
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    pages: dict[str, dict] = {}
    queue = [served + "index.html"]
    links: dict[str, str] = {}  # internal link -> the page it is on
    while queue:
        url = queue.pop(0)
        if url in pages:
            continue
        response = page.goto(url, wait_until="load")
        assert response is not None and response.status == 200, (
            f"{url} did not load: {response and response.status}"
        )
        state = page.evaluate(PAGE_JS)
        assert state["article"] > 0, f"{url} loaded with no article text"
        pages[url] = state
        for link in state["links"]:
            target, _ = urldefrag(link)
            if not link.startswith(served):
                continue  # a link out (GitHub, docs.ray.io): not a request the page makes
            links.setdefault(link, url)
            if target.endswith(".html") and target not in pages and target not in queue:
                queue.append(target)
    context.close()

    # every internal link resolves: its file is served, its anchor is on its page
    broken = []
    for link, on in sorted(links.items()):
        target, anchor = urldefrag(link)
        if target.endswith(".html"):
            if target not in pages:
                broken.append(f"{link} (on {on}): not reached")
            elif anchor and anchor not in pages[target]["ids"]:
                broken.append(f"{link} (on {on}): no element with id {anchor!r}")
        elif _status(target) != 200:
            broken.append(f"{link} (on {on}): HTTP {_status(target)}")
    assert not broken, "links that do not resolve:\n  " + "\n  ".join(broken)

    # every page of the navigation was reached
    unreached = [p for p in docsite.nav_pages() if served + p not in pages]
    assert not unreached, f"pages in the navigation that no link reached: {unreached}"
    assert len(pages) >= 15, f"only {len(pages)} pages reached: {sorted(pages)}"
    assert not errors, f"scripts failed on the site: {errors}"
    assert not nonlocal_requests(requests), f"the site asked the internet for: {nonlocal_requests(requests)}"

    # every lesson page shows its plots and offers its notebook
    executed = docsite.executed_lessons()
    shown = 0
    for name, notebook in executed.items():
        url = served + "notebooks/" + name.replace(".ipynb", ".html")
        assert url in pages, f"lesson page {url} not reached from the navigation"
        state = pages[url]
        plots = _png_outputs(notebook)
        shown += plots
        assert state["decoded"] >= plots, (
            f"{url} shows {state['decoded']} decoded images of {state['images']}; the executed lesson has {plots} plots"
        )
        download = served + "notebooks/" + name
        assert download in state["downloads"], f"{url} has no link to download {name}"
        assert _status(download) == 200
    assert shown >= 3, f"the lesson pages show {shown} plots in all: the executed lessons lost their figures"
