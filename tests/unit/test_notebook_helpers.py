import json
from pathlib import Path

from course_utils.core.notebook import show_source
from course_utils.core.plan import per_worker_batch
from maintainer_tools import run_course
from maintainer_tools.harness import tiers


def test_show_source_prints_outside_ipython(capsys, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_ipython(name, *args, **kwargs):
        if name.startswith("IPython"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_ipython)
    show_source(per_worker_batch)
    assert "def per_worker_batch" in capsys.readouterr().out


def test_lessons_selector():
    assert [p.name[:2] for p in run_course.lessons(["02"])] == ["02"]


def test_index_links_lessons_with_times(tmp_path):
    lessons = run_course.lessons()[:2]
    runs = [
        run_course.LessonRun(lessons[0].stem, 90.0),
        run_course.LessonRun(lessons[1].stem, 30.0, "05. Fit: ValueError: boom"),
    ]
    page = run_course.write_index(tmp_path, runs).read_text()
    assert f'href="html/{lessons[0].stem}.html"' in page and "1.5 min" in page and "FAILED" in page
    assert "05. Fit: ValueError: boom" in page and "1 of 2 lessons passed, 1 FAILED" in page


def test_committed_notebooks_have_no_outputs_and_the_course_kernel():
    for path in run_course.lessons():
        nb = json.loads(path.read_text())
        assert nb["metadata"]["kernelspec"]["name"] == tiers.KERNEL, path.name
        for cell in nb["cells"]:
            if cell["cell_type"] == "code":
                assert not cell["outputs"] and cell["execution_count"] is None, f"{path.name} has outputs"


def test_returning_output_returns_what_fn_printed_and_wrote(capsys):
    import pytest

    from course_utils.core.notebook import returning_output

    folders = []

    def talk(n, out_dir):
        folders.append(Path(out_dir))
        print(f"epoch {n}")
        (Path(out_dir) / "model.pt").write_bytes(b"weights")
        return n * 2

    run = returning_output(talk)
    assert run(3) == (6, "epoch 3\n", {"model.pt": b"weights"}) and run.__name__ == "talk"
    assert capsys.readouterr().out == ""  # nothing printed on the way: the caller prints it
    assert not folders[0].exists(), "the task's temporary folder is gone: nothing stays on its machine"

    def fail(out_dir):
        folders.append(Path(out_dir))
        print("got this far")
        raise ValueError("boom")

    with pytest.raises(ValueError):
        returning_output(fail)()
    assert capsys.readouterr().out == "got this far\n"  # a failure keeps what was printed
    assert not folders[1].exists()


def test_show_changes_names_each_side_and_counts_the_changed_lines(capsys):
    from course_utils.core.notebook import show_changes

    def loop(config):
        return config["a"]

    def loop_edited(config):
        return config["b"]

    loop_edited.__module__ = "__main__"  # what a function defined in a notebook cell has
    show_changes(loop, loop_edited)
    out = capsys.readouterr().out
    first = out.splitlines()[0]
    assert first.startswith(f"{__name__}.loop (as shipped) -> loop_edited (this notebook's): 4 line(s)")
    loop.__module__ = "__main__"
    show_changes(loop, loop_edited)
    assert capsys.readouterr().out.startswith("loop (this notebook's) -> loop_edited (this notebook's)")


def test_show_changes_leaves_comments_out(capsys):
    from course_utils.core.notebook import show_changes

    def loop(config):
        # the old way
        return config["a"]  # a

    def loop_commented(config):
        # reworded, at length, but the code is the same
        return config["a"]  # "#" is not a comment inside a string: "#a"

    show_changes(loop, loop_commented)
    first = capsys.readouterr().out.splitlines()[0]
    assert ": 2 line(s)" in first, first  # only the two names' lines differ
