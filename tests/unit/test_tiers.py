"""maintainer_tools.harness.tiers.run_lesson: the one runner every tier uses, on a tiny notebook (no Ray)."""

from __future__ import annotations

import os
import sys

import nbformat
from nbmake.nb_result import NotebookResult

from maintainer_tools.harness.tiers import Tier, error_text, run_lesson


def _notebook(*sources: str) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# a lesson")] + [nbformat.v4.new_code_cell(s) for s in sources]
    return nb


def test_a_run_saves_its_copy_where_the_tier_says_and_starts_the_kernel_there(tmp_path):
    tier = Tier("unit", folder=tmp_path / "copies")
    printed = "import os, sys\nprint(os.getcwd())\nprint('to the terminal', file=sys.__stderr__, flush=True)"
    run = run_lesson(tmp_path / "07_tiny.ipynb", tier, nb=_notebook(printed), timeout_s=60)
    assert (
        run.ok and run.error is None and isinstance(run, NotebookResult)
    )  # nbmake's form: pytest reports it
    assert run.copy == tmp_path / "copies" / "07_tiny.ipynb"
    saved = nbformat.read(str(run.copy), as_version=4)
    assert saved.cells[1].outputs[0]["text"].strip() == str(tmp_path / "copies")
    assert run.printed().strip() == str(tmp_path / "copies")
    # the kernel process's own stderr is kept in a log beside the copies, not on the terminal
    assert run.kernel_log == tmp_path / "logs" / "unit-07_tiny.kernel.log"
    assert "to the terminal" in run.terminal()
    assert run.seconds > 0


def test_a_failing_cell_is_named_with_its_error(tmp_path):
    nb = _notebook("x = 1", "raise ValueError('boom')", "print('never')")
    run = run_lesson(tmp_path / "07_tiny.ipynb", Tier("unit", folder=tmp_path), nb=nb, timeout_s=60)
    assert not run.ok and run.error.failing_cell_index == 2
    assert "ValueError" in run.error.summary and "boom" in run.error.summary
    assert error_text(run).startswith("cell 2: ") and "raise ValueError('boom')" in error_text(run)
    assert (
        nbformat.read(str(run.copy), as_version=4).cells[3].outputs == []
    )  # the copy shows where it stopped


def test_a_cell_failing_on_purpose_is_not_the_failing_one(tmp_path):
    on_purpose = nbformat.v4.new_code_cell(
        "raise KeyError('on purpose')", metadata={"tags": ["raises-exception"]}
    )
    nb = _notebook("x = 1", "raise ValueError('boom')")
    nb.cells.insert(1, on_purpose)
    run = run_lesson(tmp_path / "07_tiny.ipynb", Tier("unit", folder=tmp_path), nb=nb, timeout_s=60)
    assert not run.ok and run.error.failing_cell_index == 3, error_text(run)
    assert "boom" in run.error.summary


def test_a_dead_kernel_names_the_cell_it_died_in(tmp_path):
    nb = _notebook("x = 1", "import os\nos._exit(1)", "print('never')")
    nb.cells.insert(
        1, nbformat.v4.new_code_cell("raise KeyError('on purpose')", metadata={"tags": ["raises-exception"]})
    )
    run = run_lesson(tmp_path / "07_tiny.ipynb", Tier("unit", folder=tmp_path), nb=nb, timeout_s=60)
    assert not run.ok and run.error.failing_cell_index == 3, error_text(run)


def test_a_cell_past_its_timeout_is_the_failing_one(tmp_path):
    nb = _notebook("x = 1", "import time\ntime.sleep(30)", "print('never')")
    run = run_lesson(tmp_path / "07_tiny.ipynb", Tier("unit", folder=tmp_path), nb=nb, timeout_s=3)
    assert not run.ok and run.error.failing_cell_index == 2, error_text(run)
    assert "timed out" in run.error.summary.lower() or "timeout" in run.error.summary.lower(), (
        run.error.summary
    )


def test_a_tier_with_an_environment_gives_the_kernel_that_alone(tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_TIERS_TEST_SECRET", "from this process")
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "ONLY_THIS": "yes"}
    tier = Tier("unit", folder=tmp_path, env=env)
    code = "import os\nprint(os.environ.get('ONLY_THIS'), os.environ.get('COURSE_TIERS_TEST_SECRET'))"
    run = run_lesson(tmp_path / "07_tiny.ipynb", tier, nb=_notebook(code), timeout_s=60)
    assert run.ok, error_text(run)
    assert run.printed().strip() == "yes None"


def test_a_tier_with_its_own_kernel_specs_runs_that_kernel(tmp_path):
    spec = tmp_path / "kernels" / "own-kernel"
    spec.mkdir(parents=True)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    spec.joinpath("kernel.json").write_text(
        f'{{"argv": {argv!r}, "display_name": "own", "language": "python", "env": {{"FROM_SPEC": "1"}}}}'.replace(
            "'", '"'
        )
    )
    tier = Tier("unit", kernel="own-kernel", kernels=tmp_path / "kernels", folder=tmp_path / "content")
    run = run_lesson(
        tmp_path / "07_tiny.ipynb", tier, nb=_notebook("import os\nprint(os.environ['FROM_SPEC'])")
    )
    assert run.ok, error_text(run)
    assert run.printed().strip() == "1"


def test_named_keeps_everything_but_the_folder():
    tier = Tier("workshop", answered=True).named("workshop-learner2")
    assert (tier.name, tier.answered) == ("workshop-learner2", True)
    assert tier.out_dir.parts[-3:] == ("build", "tests", "workshop-learner2")
