"""Small display helpers for the notebooks."""

from __future__ import annotations

import inspect
import io
import textwrap
import tokenize


def show_source(obj) -> None:
    """Show the source of a ``course_utils`` function, class or method in the notebook (highlighted in Jupyter).

    Lessons run the library's code rather than a copy pasted into a cell, and show it with
    this, so what the learner reads is exactly what runs.
    """
    source = textwrap.dedent(inspect.getsource(obj))  # a method shows from its own indentation
    try:
        from IPython.display import Markdown, display

        display(Markdown(f"`{obj.__module__}.{obj.__qualname__}`\n```python\n{source}\n```"))
    except ImportError:
        print(source)


def returning_output(fn):
    """``fn``, changed to return ``(its result, the lines it printed, the files it wrote)``.

    For a Ray task, which runs on whichever machine of the cluster has a free slot. Its prints
    reach the notebook through Ray's log forwarding, a moment after ``ray.get`` has returned, so in
    JupyterLab they can land under whichever cell runs next: returned with the result, the cell
    prints them itself, where they belong. The files it writes would stay on that machine's disk:
    ``fn`` is given ``out_dir=`` a fresh temporary folder there, and they come back as
    ``{name: bytes}`` (the folder is removed). If ``fn`` fails, what it printed goes to the
    worker's stdout (its log file, forwarded) before the error.
    """
    import contextlib
    import io
    import shutil
    import tempfile
    from pathlib import Path

    def run(*args, **kwargs):
        printed = io.StringIO()
        folder = Path(tempfile.mkdtemp(prefix="course-task-"))
        try:
            with contextlib.redirect_stdout(printed):
                result = fn(*args, out_dir=str(folder), **kwargs)
            files = {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}
        except BaseException:
            print(printed.getvalue(), end="", flush=True)
            raise
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        return result, printed.getvalue(), files

    run.__name__ = run.__qualname__ = fn.__name__  # the task's name in the dashboard and logs
    run.__doc__ = fn.__doc__
    return run


def _whose(function) -> str:
    """``name (this notebook's)`` for a function a cell defined, ``module.name (as shipped)`` otherwise."""
    if function.__module__ == "__main__":
        return f"{function.__name__} (this notebook's)"
    return f"{function.__module__}.{function.__name__} (as shipped)"


def _code_lines(source: str) -> list[str]:
    """``source``'s lines without its comments (a line that was only a comment goes): what runs."""
    lines = source.splitlines()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            row, col = token.start
            lines[row - 1] = lines[row - 1][:col].rstrip()
    return [
        line
        for line, original in zip(lines, source.splitlines(), strict=True)
        if line.strip() or not original.strip()
    ]


def show_changes(before, after) -> None:
    """Show what changed from function ``before`` to ``after`` as a diff (``-`` removed, ``+`` added).

    Lesson 03 and 04 write their loops out in full; this shows the few lines that differ from lesson 02's,
    read from the code that runs (a function defined in a cell included), comments left out.
    """
    import difflib

    old = _code_lines(textwrap.dedent(inspect.getsource(before)))
    new = _code_lines(textwrap.dedent(inspect.getsource(after)))
    diff = "\n".join(difflib.unified_diff(old, new, before.__name__, after.__name__, n=1, lineterm=""))
    changed = sum(line[:1] in "+-" and line[:3] not in ("+++", "---") for line in diff.splitlines())
    print(
        f"{_whose(before)} -> {_whose(after)}: "
        f"{changed} line(s) removed or added, the name and docstring included (comments left out)"
    )
    try:
        from IPython.display import Markdown, display

        display(Markdown(f"```diff\n{diff}\n```"))
    except ImportError:
        print(diff)
