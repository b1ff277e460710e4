"""The workshop path: lessons run from JupyterLab's UI in a real browser (``CI_LESSONS``; all six
with ``COURSE_BROWSER_LESSONS=all``), against a Ray cluster someone else started, with shared S3
storage and a teammate on the same cluster.

This is the setting a workshop learner has (``maintainer_tools/harness/workshop.py``: a real ``ray start --head``,
``RAY_ADDRESS`` and the token, ``COURSE_STORAGE=s3://...`` on moto's server, an organiser's file and
a teammate's run and actor that lesson 06 must leave alone). The laptop's setting (local Ray, local
storage) is what ``pytest notebooks`` runs; one browser run covers the browser, the cluster and the
S3 paths together, as one workshop learner does. While the browser runs lessons 02 and 06, another
learner (their own driver process, ``COURSE_LEARNER`` learner2) runs the same lesson at the same
moment on the same 4-slot cluster, storage and MNIST copy; in the weekly run of every lesson a third
(learner3) joins, so three fits want 6 slots and three lesson 05s want their model actors and pools at
once. Every one of those runs must pass without a worker-startup timeout or a traceback, and each
learner's times end the test output. (A fit that waits for slots someone else holds is
``tests/integration/test_busy_cluster.py``'s at each push.)

``./build.sh lab`` is started headless (127.0.0.1, a token, a free port) on copies of the lessons
in ``build/browser/notebooks`` (the committed notebooks stay without outputs). Debian's Chromium,
driven by Playwright (its own browser download does not work offline), opens each selected lesson in
order, runs all cells from the Run menu, waits until every code cell has run, saves with Ctrl+S
and checks, from the saved file and from the page:

- every code cell ran (an execution count), no output is an error, no cell waited on input;
- the course kernel ran it (the saved kernelspec, the server's session, the name in the toolbar);
- plots rendered (``image/png`` outputs, decoded ``<img>`` elements in the page);
- tqdm's progress bars rendered as widgets (``application/vnd.jupyter.widget-view+json``
  outputs, a progress element in the page), never "IProgress not found";
- no request left the machine (every request and websocket the browser made went to 127.0.0.1).

Screenshots (the page after each lesson, its first plot and progress bar) and ``report.json``
(seconds, cells, plots, widgets, requests per lesson) go to ``build/browser/``: the CI artefact.
Chromium is ``/usr/bin/chromium`` (``COURSE_CHROMIUM`` overrides it); missing, the test fails
and says how to install it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import pytest
import tornado.httpclient
import tornado.websocket

from course_utils.lesson04.elastic import free_port
from maintainer_tools.cluster import _end_group
from maintainer_tools.harness.chromium import browser, chromium, nonlocal_requests  # noqa: F401 (browser, chromium: fixtures)
from maintainer_tools.harness.notebook_runs import BROWSER as BROWSER_PATH
from maintainer_tools.harness.notebook_runs import (
    CLUSTER,
    LESSONS,
    RAY_ON_STOP,
    S3,
    SHARED,
    TRACEBACK,
    every_lesson,
    tier_lessons,
)
from maintainer_tools.harness.tiers import KERNEL
from maintainer_tools.harness.workshop import check_others_left_alone, workshop  # noqa: F401 (workshop: a fixture)
from tests.checkout import REPO_ROOT

pytestmark = [
    pytest.mark.browser,
    pytest.mark.integration,
    pytest.mark.notebooks,
    pytest.mark.path(BROWSER_PATH),
    pytest.mark.path(CLUSTER),
    pytest.mark.path(S3),
]

# Lessons CI runs in the browser; COURSE_BROWSER_LESSONS=all runs all six (ci.yml's weekly job does).
# 02 and 06 are where a workshop's learners meet on one cluster: fits that wait for slots, a cleanup
# that must leave the others' things. The other lessons run on a cluster with S3 in the hosts tier
# (lesson 05's pool across three hosts) and on the laptop path; what the browser adds to them (plots,
# widgets, Run All) is what these two show too.
CI_LESSONS = ("02", "06")
EVERY_LESSON = every_lesson("COURSE_BROWSER_LESSONS")
SELECTED = tier_lessons("COURSE_BROWSER_LESSONS", CI_LESSONS)
KERNEL_DISPLAY = "Python (Ray Train course)"
OUT = REPO_ROOT / "build" / "browser"
# Lessons whose tqdm bars stay on screen (others close theirs: leave=False); 02's is its fit's bar.
TQDM_LESSONS = {"01_single_gpu_baseline", "02_ray_train_migration", "03_ray_data_integration"}
RUN_TIMEOUT_S = 1200  # a lesson's run-all (lesson 04 takes 4-5 min on 2 cores)


class Lab:
    """A ``./build.sh lab`` server started for the test, and its REST API."""

    def __init__(self, base: str, token: str, root: Path, process: subprocess.Popen, log: Path):
        self.base, self.token, self.root, self.process, self.log = base, token, root, process, log

    def api(self, path: str, method: str = "GET"):
        request = urllib.request.Request(
            f"{self.base}{path}", method=method, headers={"Authorization": f"token {self.token}"}
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            body = response.read()
        return json.loads(body) if body else None

    def log_tail(self, n: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])

    def log_since(self, offset: int) -> list[str]:
        """The server's terminal lines written after byte ``offset`` (its kernels' stderr goes there too)."""
        with self.log.open("rb") as log:
            log.seek(offset)
            return log.read().decode(errors="replace").splitlines()

    def restart_kernel(self, kernel_id: str, timeout_s: float = 120) -> None:
        """What JupyterLab's Kernel > Restart Kernel asks the server, then wait until the new kernel answers.

        The server answers the restart once the new process is launched, before it listens (closed while
        it starts, it prints Python's start-up traceback into the terminal). Its REST model is no sign:
        the new kernel's start-up messages answer ``kernel_info_request``, which the server does not count
        as activity, so ``last_activity`` and "idle" may stay the old kernel's. The one sure sign is what
        JupyterLab itself waits for: a ``kernel_info_reply`` on the kernel's websocket."""
        self.api(f"/api/kernels/{kernel_id}/restart", method="POST")
        # Playwright's sync API holds this thread's event loop: the websocket talk runs on another thread.
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            pool.submit(asyncio.run, self._kernel_info(kernel_id, timeout_s)).result()

    async def _kernel_info(self, kernel_id: str, timeout_s: float) -> None:
        """Send ``kernel_info_request`` on the kernel's websocket and wait for its reply."""
        url = self.base.replace("http", "ws", 1) + f"/api/kernels/{kernel_id}/channels"
        request = tornado.httpclient.HTTPRequest(url, headers={"Authorization": f"token {self.token}"})
        msg_id = uuid.uuid4().hex
        header = {
            "msg_id": msg_id,
            "msg_type": "kernel_info_request",
            "session": uuid.uuid4().hex,
            "username": "test",
            "date": "",
            "version": "5.3",
        }
        message = {
            "header": header,
            "parent_header": {},
            "metadata": {},
            "content": {},
            "channel": "shell",
            "buffers": [],
        }

        try:
            async with asyncio.timeout(timeout_s):
                connection = await tornado.websocket.websocket_connect(request)
                try:
                    await connection.write_message(json.dumps(message))
                    while (raw := await connection.read_message()) is not None:
                        answer = json.loads(raw) if isinstance(raw, str) else {}
                        if (answer.get("parent_header") or {}).get("msg_id") == msg_id and (
                            answer["header"]["msg_type"] == "kernel_info_reply"
                        ):
                            return
                finally:
                    connection.close()
        except TimeoutError:
            raise AssertionError(
                f"the restarted kernel did not answer kernel_info within {timeout_s} s"
            ) from None
        raise AssertionError("the kernel's websocket closed before the restarted kernel answered")


@pytest.fixture(scope="module")
def lab(chromium, workshop):  # noqa: F811
    """``./build.sh lab`` headless on a free loopback port, on copies of the lessons, its kernels
    joining the workshop's cluster and storage (the environment ``workshop`` set)."""
    if OUT.exists():
        shutil.rmtree(OUT)
    root = OUT / "notebooks"
    root.mkdir(parents=True)
    for lesson in LESSONS:
        shutil.copy2(lesson, root / lesson.name)
    jupyter_state = OUT / "jupyter"  # user settings and workspaces of this run only
    token = uuid.uuid4().hex
    port = free_port()
    log = OUT / "jupyterlab.log"
    env = {**os.environ, "COURSE_PROFILE": os.environ.get("COURSE_TEST_PROFILE", "smoke")}
    with log.open("w") as log_file:
        process = subprocess.Popen(
            [
                str(REPO_ROOT / "build.sh"),
                "lab",
                "--no-browser",
                f"--port={port}",
                "--ServerApp.port_retries=0",
                f"--IdentityProvider.token={token}",
                f"--notebook-dir={root}",
                f"--LabApp.user_settings_dir={jupyter_state / 'settings'}",
                f"--LabApp.workspaces_dir={jupyter_state / 'workspaces'}",
            ],
            cwd=REPO_ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    server = Lab(f"http://127.0.0.1:{port}", token, root, process, log)
    deadline = time.monotonic() + 600  # ./build.sh setup may install requirements first
    while True:
        try:
            server.api("/api/status")
            break
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                _end_group(process, grace_s=60)  # Jupyter shuts its kernels down on SIGTERM
                pytest.fail(f"./build.sh lab did not start on {server.base}:\n{server.log_tail()}")
            time.sleep(0.5)
    yield server
    for session in server.api("/api/sessions") or []:
        server.api(f"/api/sessions/{session['id']}", method="DELETE")
    _end_group(process, grace_s=60)  # Jupyter shuts its kernels down on SIGTERM


@pytest.fixture(scope="module")
def report():
    lessons: dict[str, dict] = {}
    yield lessons
    (OUT / "report.json").write_text(json.dumps(lessons, indent=1) + "\n")


# Runs in the page: what the open notebook shows now.
PAGE_STATE_JS = """() => {
  const panel = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden)');
  if (!panel) return null;
  const prompts = [...panel.querySelectorAll('.jp-CodeCell .jp-InputPrompt')].map(e => e.textContent.trim());
  const indicator = panel.querySelector('.jp-Notebook-ExecutionIndicator');
  const kernel = panel.querySelector('.jp-Toolbar-kernelName');
  const imgs = [...panel.querySelectorAll('.jp-OutputArea-output img')];
  return {
    prompts,
    status: indicator ? indicator.getAttribute('data-status') : null,
    kernel: kernel ? kernel.textContent.trim() : null,
    stdin: panel.querySelectorAll('.jp-Stdin').length,
    images: imgs.length,
    imagesDecoded: imgs.filter(i => i.complete && i.naturalWidth > 0).length,
    progress: panel.querySelectorAll('.jp-OutputArea-output .widget-hprogress').length,
    widgetErrors: [...panel.querySelectorAll('.jp-OutputArea-output')]
      .map(e => e.textContent)
      .filter(t => t.includes('Error displaying widget') || t.includes('Loading widget')).length,
  };
}"""


def _code_cells(nb: dict) -> list[dict]:
    return [cell for cell in nb["cells"] if cell["cell_type"] == "code"]


def _outputs(nb: dict) -> list[dict]:
    return [output for cell in _code_cells(nb) for output in cell.get("outputs", [])]


def _output_text(output: dict) -> str:
    text = output.get("text", "")
    return "".join(text) if isinstance(text, list) else str(text)


def _start_run_all(page, attempts: int = 3, start_s: float = 30.0) -> list[str]:
    """Run → Run All Cells, as a learner clicks it; again when the click did not queue every cell.

    A cold browser's first page can take the click before the menu is ready (seen on a machine whose
    Chromium was installed minutes before: lesson 01's run-all ran nothing). Run All queues every code
    cell at once (``[*]``); seen once in CI: lesson 05's click ran its first code cell only, with no
    error and no dialog, and left the rest unqueued. A click that queued every cell is never repeated;
    one that queued some is repeated once they have run, as a learner would click it again. Returns
    the dialogs it answered and a line for each click repeated.
    """
    notes: list[str] = []
    for _ in range(attempts):
        notes += _answer_dialogs(page)
        page.locator(".jp-NotebookPanel .jp-Notebook").first.click()
        page.locator(".lm-MenuBar-item", has_text="Run").first.click()
        page.locator(".lm-Menu-item", has_text="Run All Cells").first.click()
        deadline = time.monotonic() + start_s
        while time.monotonic() < deadline:
            state = page.evaluate(PAGE_STATE_JS)
            queued = [bool(p.strip("[]: ")) for p in state["prompts"]] if state else []  # '[*]:', '[1]:'
            if queued and all(queued):
                return notes
            if any(queued) and state["status"] == "idle" and not any("*" in p for p in state["prompts"]):
                notes.append(f"Run All Cells ran {sum(queued)} of {len(queued)} code cells; clicked it again")
                break
            page.wait_for_timeout(500)
        else:
            page.keyboard.press("Escape")  # close a menu left open
    raise AssertionError(f"Run All Cells did not queue every cell in {attempts} tries: {notes}")


# A dialog that means the lesson cannot go on, by a phrase of its text (JupyterLab's wording).
FATAL_DIALOGS = (
    "appears to have died",
    "Kernel Error",
    "Server Connection Error",
    "No Kernel",
    "Select Kernel",
)


def _answer_dialogs(page) -> list[str]:
    """Answer a dialog open on the page as a learner would: read it, then press its default button.

    Seen once in CI: a dialog over lesson 05's notebook before Run All (its text was not kept), which
    blocked every click for 120 s. The texts are returned (the report and the summary show them); one
    that says the kernel or server is gone fails the lesson with that text instead.
    """
    seen: list[str] = []
    for _ in range(10):
        texts = _open_dialogs(page)
        if not texts:
            return seen
        seen += texts
        fatal = [t for t in texts if any(phrase in t for phrase in FATAL_DIALOGS)]
        assert not fatal, f"JupyterLab shows a dialog: {fatal}"
        page.locator(".jp-Dialog .jp-Dialog-button.jp-mod-accept").first.click()
        page.wait_for_timeout(500)
    raise AssertionError(f"JupyterLab keeps showing dialogs: {_open_dialogs(page)}")


def _open_dialogs(page) -> list[str]:
    """The text of each JupyterLab dialog open on the page (a kernel that died, a file changed on disk)."""
    try:
        return [" ".join(t.split()) for t in page.locator(".jp-Dialog").all_inner_texts()]
    except Exception:  # the page itself is gone: nothing to read
        return []


def _wait_for_run(page, started: float) -> dict:
    """Poll the page until every code cell has a number and the kernel is idle (or it stopped)."""
    settled_since = None
    while True:
        state = page.evaluate(PAGE_STATE_JS)
        if state is None:
            raise AssertionError("the notebook panel disappeared from the page")
        if state["stdin"]:
            raise AssertionError("a cell waits on input (an input() box in the page)")
        running = any("*" in p for p in state["prompts"])
        if not running and state["status"] == "idle":
            if all(any(ch.isdigit() for ch in p) for p in state["prompts"]):
                return state
            # Cells left unrun after an error (JupyterLab stops run-all there): give it a moment.
            settled_since = settled_since or time.monotonic()
            if time.monotonic() - settled_since > 15:
                return state
        else:
            settled_since = None
        if time.monotonic() - started > RUN_TIMEOUT_S:
            raise AssertionError(f"run-all did not finish in {RUN_TIMEOUT_S} s: prompts {state['prompts']}")
        page.wait_for_timeout(2000)


def _element_screenshot(page, element, path: Path) -> None:
    """Screenshot one output. Cells off screen render late (content-visibility), shifting the
    layout while scrolling: scroll until the element stays put, then shoot."""
    if not element.count():
        return
    for _ in range(5):
        element.scroll_into_view_if_needed()
        before = element.bounding_box()
        page.wait_for_timeout(500)
        if element.bounding_box() == before:
            break
    element.screenshot(path=str(path))


# While the browser's learner runs lessons 02 and 06 (and 05 in the weekly run of every lesson), other
# learners of the workshop run the same lesson at the same moment, each in a process of their own (as
# their own kernel would be), through the runner every tier uses, against the same cluster, storage and MNIST copy.
# At each push one more: two fits on the workshop's 4 slots, two cleanups that must each leave the
# other's things. Weekly two more: three fits that need 6 slots, three lesson 05s whose model actors and
# pools want the slots at once. One JSON line per lesson. (Four at once, one per slot, ran by hand:
# CHANGELOG.md.)
OTHER_LEARNERS = ("learner2", "learner3") if EVERY_LESSON else ("learner2",)
AT_ONCE = {"02_ray_train_migration", "06_cleanup"} | ({"05_inference"} if EVERY_LESSON else set())
LEARNER_SESSION = """
import json, sys, time
from pathlib import Path
from maintainer_tools.harness.notebook_runs import alarming_output
from maintainer_tools.harness.tiers import WORKSHOP_TIER, error_text, run_lesson

name = sys.argv[2]
started = time.monotonic()
result = run_lesson(Path("notebooks") / name, WORKSHOP_TIER.named("workshop-" + sys.argv[1]), timeout_s=900)
text = json.dumps(result.nb.cells, default=str)
print("LESSON " + json.dumps({
    "seconds": round(time.monotonic() - started, 1), "error": error_text(result),
    "alarming": alarming_output(result.nb, name, shared_cluster=True),
    "startup_timeout": "startup timed out" in text or "WorkerGroupStartupTimeoutError" in text,
}), flush=True)
"""


def _start_other_learners(lesson: Path) -> dict[str, subprocess.Popen]:
    """The other learners start ``lesson`` now, beside the browser's learner."""
    if lesson.stem not in AT_ONCE:
        return {}
    return {
        who: subprocess.Popen(
            [sys.executable, "-c", LEARNER_SESSION, who, lesson.name],
            cwd=REPO_ROOT,
            env={
                **os.environ,
                "COURSE_LEARNER": who,
                "COURSE_PROFILE": os.environ.get("COURSE_TEST_PROFILE", "smoke"),
            },
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for who in OTHER_LEARNERS
    }


def _other_learners_results(learners: dict[str, subprocess.Popen], lesson: Path) -> dict[str, dict]:
    """Each other learner's run of ``lesson``; a session that ended without a result fails here."""
    results = {}
    for who, process in learners.items():
        out, err = process.communicate(timeout=1800)
        line = next((x for x in out.splitlines() if x.startswith("LESSON ")), None)
        assert process.returncode == 0 and line, (
            f"{who}'s {lesson.name} ended without a result (exit {process.returncode}):\n{out[-2000:]}\n{err[-4000:]}"
        )
        results[who] = json.loads(line[7:])
    return results


@pytest.mark.parametrize("lesson", SELECTED, ids=[p.stem for p in SELECTED])
def test_lesson_runs_in_jupyterlab(lesson, lab, browser, report, workshop, summary_note):  # noqa: F811
    name = lesson.name
    others = _start_other_learners(lesson)
    saved = lab.root / name
    requests: list[str] = []
    console_errors: list[str] = []
    context = browser.new_context(viewport={"width": 1440, "height": 1000})
    context.on("request", lambda r: requests.append(r.url))
    page = context.new_page()
    page.on("websocket", lambda ws: requests.append(ws.url))
    page.on("console", lambda m: console_errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: console_errors.append(str(e)))
    page.set_default_timeout(120_000)
    started = time.monotonic()
    restarted_at = None  # the server log's size when the learner restarted the kernel
    try:
        page.goto(f"{lab.base}/lab/tree/{name}?reset&token={lab.token}")
        page.wait_for_selector(".jp-NotebookPanel .jp-Toolbar-kernelName")
        page.wait_for_function(
            "() => document.querySelector('.jp-NotebookPanel .jp-Notebook-ExecutionIndicator')"
            "?.getAttribute('data-status') === 'idle'"
        )
        dialogs = _start_run_all(page)
        state = _wait_for_run(page, started)
        ran_s = time.monotonic() - started
        mtime = saved.stat().st_mtime
        page.locator(".jp-NotebookPanel .jp-Notebook").first.click()
        page.keyboard.press("Control+s")
        deadline = time.monotonic() + 60
        while saved.stat().st_mtime == mtime or page.locator(".lm-TabBar-tab.jp-mod-dirty").count():
            assert time.monotonic() < deadline, "Ctrl+S did not save the notebook within 60 s"
            page.wait_for_timeout(500)
        state = page.evaluate(PAGE_STATE_JS)
        sessions = [s for s in lab.api("/api/sessions") if s["path"].endswith(name)]
        page.screenshot(path=str(OUT / f"{lesson.stem}.png"))
        for kind, selector in (
            ("plot", ".jp-OutputArea-output img"),
            ("progress", ".jp-OutputArea-output:has(.widget-hprogress)"),
        ):
            _element_screenshot(page, page.locator(selector).first, OUT / f"{lesson.stem}-{kind}.png")
        # The learner restarts the kernel that ran Ray; then it is closed (finally, below).
        restarted_at = lab.log.stat().st_size
        lab.restart_kernel(sessions[0]["kernel"]["id"])
    except Exception as failure:
        page.screenshot(path=str(OUT / f"{lesson.stem}-failed.png"))
        for process in others.values():  # the other learners' sessions end with this lesson's failure
            process.kill()
        dialogs = _open_dialogs(page)
        if (
            dialogs
        ):  # what the learner would read on screen, rather than Playwright's "intercepts pointer events"
            raise AssertionError(f"{name}: JupyterLab shows a dialog: {dialogs}") from failure
        raise
    finally:
        # Each lesson's kernel (and the Ray it started) ends before the next lesson opens.
        for session in lab.api("/api/sessions") or []:
            lab.api(f"/api/sessions/{session['id']}", method="DELETE")
        context.close()
    if restarted_at is not None:
        on_stop = [
            line
            for line in lab.log_since(restarted_at)
            if RAY_ON_STOP.search(line) or TRACEBACK in line or "Fatal Python error" in line
        ]
        assert not on_stop, f"{name}: restarting and closing its kernel printed: {on_stop[:20]}"

    if others:
        together = _other_learners_results(others, lesson)
        summary_note(
            f"workshop, {len(together) + 1} learners at once on {workshop['cluster'].head.num_cpus} slots, {lesson.stem}: browser "
            f"{ran_s:.0f} s, " + ", ".join(f"{who} {r['seconds']:.0f} s" for who, r in together.items())
        )
        for who, r in together.items():
            assert not r["error"], (
                f"{who}'s {name}, beside the browser's, failed (build/tests/workshop-{who}/):\n{r['error']}"
            )
            assert not r["startup_timeout"], f"{who}'s {name} shows a worker-startup timeout"
            assert not r["alarming"], f"{who}'s {name} shows what reads as 'it broke': {r['alarming']}"
        assert "startup timed out" not in saved.read_text(), (
            f"the browser's {name} shows a worker-startup timeout"
        )
    nb = json.loads(saved.read_text())
    cells = _code_cells(nb)
    outputs = _outputs(nb)
    unrun = [
        i
        for i, cell in enumerate(nb["cells"])
        if cell["cell_type"] == "code" and cell["execution_count"] is None
    ]
    errors = [f"{o['ename']}: {o['evalue']}" for o in outputs if o["output_type"] == "error"]
    pngs = sum("image/png" in o.get("data", {}) for o in outputs)
    widgets = sum("application/vnd.jupyter.widget-view+json" in o.get("data", {}) for o in outputs)
    left = nonlocal_requests(requests)
    report[lesson.stem] = {
        "seconds_to_run_all": round(ran_s, 1),
        "code_cells": len(cells),
        "png_outputs": pngs,
        "widget_outputs": widgets,
        "page": state,
        "requests": len(requests),
        "nonlocal_requests": left,
        "kernels": [s["kernel"]["name"] for s in sessions],
        "console_errors": console_errors[:20],
        "dialogs_answered": dialogs,
    }
    if dialogs:
        summary_note(f"browser, {lesson.stem}: dialogs answered and Run All clicks repeated: {dialogs}")
    print(
        f"{lesson.stem}: run all cells in JupyterLab {ran_s:.0f} s, {len(cells)} code cells, {pngs} plots, {widgets} widgets"
    )

    # Errors first: JupyterLab's run-all stops at the first error, so an error explains the unrun cells.
    assert not errors, f"{name}: error outputs: {errors}; cells left unrun after it: {unrun}"
    assert not unrun, (
        f"{name}: code cells without an execution count (index in the notebook): {unrun}, no error output; "
        f"JupyterLab's log ends:\n{lab.log_tail()}"
    )
    assert nb["metadata"]["kernelspec"]["name"] == KERNEL, nb["metadata"]["kernelspec"]
    assert [s["kernel"]["name"] for s in sessions] == [KERNEL], sessions
    assert state["kernel"] == KERNEL_DISPLAY, f"the page shows kernel {state['kernel']!r}"
    assert not [o for o in outputs if "IProgress not found" in _output_text(o)], "tqdm fell back to text"
    assert pngs >= 1, f"{name}: no plot in the saved notebook"
    assert state["imagesDecoded"] >= pngs, (
        f"{name}: {pngs} plots saved, {state['imagesDecoded']} rendered images"
    )
    assert not state["widgetErrors"], f"{name}: a widget did not render: {state}"
    if lesson.stem in TQDM_LESSONS:
        assert widgets >= 1 and state["progress"] >= 1, f"{name}: no tqdm progress bar rendered: {state}"
    assert not left, f"{name}: requests left the machine: {left}"


@pytest.mark.path(SHARED)
def test_lesson_06_left_what_is_not_the_course_s(workshop):  # noqa: F811
    check_others_left_alone(workshop)
