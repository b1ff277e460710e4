"""Debian's Chromium through Playwright, as the browser tests drive it (JupyterLab, the docs site).

``/usr/bin/chromium`` (``COURSE_CHROMIUM`` names another binary); missing, a test fails saying how to
install it. ``nonlocal_requests`` lists what a page asked of anything but this machine: the course
must work offline, so every browser test fails on one.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from urllib.parse import urlparse

import pytest

CHROMIUM = os.environ.get("COURSE_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
LOCAL_HOSTS = {"127.0.0.1", "localhost"}


def nonlocal_requests(urls: Iterable[str]) -> list[str]:
    """The URLs, of those a page requested, that would leave the machine (data:, blob: stay)."""
    return sorted(
        {
            u
            for u in urls
            if urlparse(u).scheme not in {"data", "blob", "about"} and urlparse(u).hostname not in LOCAL_HOSTS
        }
    )


@pytest.fixture(scope="module")
def chromium() -> str:
    """The browser binary, checked before anything else starts."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        pytest.fail(
            "playwright is not installed: ./build.sh test installs it (pinned in requirements-dev.txt)",
            pytrace=False,
        )
    if not Path(CHROMIUM).exists():
        pytest.fail(
            f"Chromium not found at {CHROMIUM}: install it with `apt-get install -y chromium` "
            "(Debian/Ubuntu), or set COURSE_CHROMIUM to a Chromium/Chrome binary",
            pytrace=False,
        )
    return CHROMIUM


@pytest.fixture(scope="module")
def browser(chromium) -> Iterator:
    """A headless Chromium for the module."""
    from playwright.sync_api import sync_playwright

    playwright = sync_playwright().start()
    browser = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS, headless=True)
    yield browser
    browser.close()
    playwright.stop()
