"""``./build.sh course``: execute every lesson in order, headless, into the build folder.

Writes executed copies (``build/notebooks``), HTML (``build/html``) and an index page linking
the lessons with their run times. Committed notebooks stay without outputs.
"""

from __future__ import annotations

import argparse
import html
import sys
import time
from pathlib import Path

from course_utils.config import REPO_ROOT, build_root, profile_name

KERNEL = "ray-train-course"


def lessons(selected: list[str] | None = None) -> list[Path]:
    """The course notebooks in order, optionally only those whose name starts with a selector."""
    found = sorted((REPO_ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    if selected:
        found = [p for p in found if any(p.name.startswith(s) for s in selected)]
        if not found:
            raise SystemExit(f"No notebook matches {selected}; choose from the numbers 01, 02, ...")
    return found


def execute(path: Path, out_dir: Path, timeout_s: int) -> float:
    """Run one notebook in a fresh kernel; save the executed copy and its HTML; return seconds.

    The kernel process's own stderr (Ray's native logs, jupyter's warnings, a stack dump when
    the kernel is stopped) goes to ``build/logs/<lesson>.kernel.log``, not the terminal: what the
    notebook prints is in its executed copy.
    """
    import nbformat
    from nbclient import NotebookClient
    from nbconvert import HTMLExporter

    nb = nbformat.read(path, as_version=4)
    (out_dir / "logs").mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    error = None
    with open(out_dir / "logs" / f"{path.stem}.kernel.log", "w") as kernel_log:
        client = NotebookClient(
            nb, timeout=timeout_s, kernel_name=KERNEL, resources={"metadata": {"path": str(path.parent)}}
        )
        try:
            client.execute(stderr=kernel_log)
        except Exception as exc:  # keep the partly executed copy: it shows where it failed
            error = exc
    seconds = time.perf_counter() - start
    (out_dir / "notebooks").mkdir(parents=True, exist_ok=True)
    (out_dir / "html").mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, out_dir / "notebooks" / path.name)
    body, _ = HTMLExporter().from_notebook_node(nb)
    (out_dir / "html" / f"{path.stem}.html").write_text(body)
    if error is not None:
        raise RuntimeError(
            f"{path.name} failed after {seconds:.0f} s; see {out_dir / 'html' / (path.stem + '.html')}"
        ) from error
    return seconds


def write_index(out_dir: Path, rows: list[tuple[Path, float | None, str]]) -> Path:
    """An HTML page linking the executed lessons in order, with each one's run time."""
    items = "\n".join(
        f'<tr><td><a href="html/{html.escape(p.stem)}.html">{html.escape(p.stem)}</a></td>'
        f"<td>{'' if s is None else f'{s / 60:.1f} min'}</td><td>{html.escape(status)}</td></tr>"
        for p, s, status in rows
    )
    page = (
        "<!doctype html><meta charset='utf-8'><title>Ray Train course</title>"
        "<h1>Distributed PyTorch with Ray Train: executed lessons</h1>"
        f"<p>Profile: {html.escape(profile_name())}. Generated {time.strftime('%Y-%m-%d %H:%M')}.</p>"
        f"<table border=1 cellpadding=4><tr><th>lesson</th><th>run time</th><th>status</th></tr>{items}</table>"
    )
    index = out_dir / "index.html"
    index.write_text(page)
    return index


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("only", nargs="*", help="lesson numbers to run (default: all), e.g. 01 02")
    parser.add_argument("--timeout", type=int, default=900, help="seconds per cell (default 900)")
    args = parser.parse_args(argv)
    out_dir = build_root()
    print(f"Running the course in the {profile_name()} profile; executed copies go to {out_dir}")
    rows: list[tuple[Path, float | None, str]] = []
    failed = False
    for path in lessons(args.only):
        print(f"{path.stem} ...", end=" ", flush=True)
        try:
            seconds = execute(path, out_dir, args.timeout)
            rows.append((path, seconds, "ok"))
            print(f"{seconds:.0f} s")
        except RuntimeError as exc:
            rows.append((path, None, "FAILED"))
            print(f"FAILED\n  {exc}\n  cause: {type(exc.__cause__).__name__}: {str(exc.__cause__)[:500]}")
            failed = True
            break
    index = write_index(out_dir, rows)
    total = sum(s for _, s, _ in rows if s)
    print(f"total: {total / 60:.1f} min; index: {index}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
