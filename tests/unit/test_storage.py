import pytest

from course_utils.core import storage as st


def test_run_path_under_storage(storage):
    assert st.resolve().run_path("abc") == f"{storage.resolve()}/abc"


@pytest.mark.parametrize("bad", ["", "a/b", "..", "."])
def test_run_path_rejects_non_names(storage, bad):
    with pytest.raises(ValueError):
        st.resolve().run_path(bad)


def test_reset_run_deletes_only_that_run(storage):
    (storage / "mine" / "checkpoint_1").mkdir(parents=True)
    (storage / "other").mkdir()
    assert st.resolve().run_exists("mine")
    deleted = st.resolve().reset_run("mine")
    assert deleted is True
    assert not (storage / "mine").exists() and (storage / "other").exists()
    assert st.resolve().reset_run("mine") is False


def test_course_storage_is_read_in_one_place():
    """Where runs go is worked out once: ``storage.resolve`` is the package's one caller of
    ``config.storage_root``, and only ``start_ray`` calls ``resolve``; everything else is handed the value."""
    import ast
    from pathlib import Path

    import course_utils

    callers: dict[str, list[str]] = {"storage_root": [], "resolve": []}
    for path in Path(course_utils.__file__).parent.rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if not isinstance(node, ast.FunctionDef):
                continue
            for call in ast.walk(node):
                if isinstance(call, ast.Call) and not call.args and not call.keywords:
                    func = call.func
                    bare = isinstance(func, ast.Name)
                    name = func.id if bare else getattr(func, "attr", None)
                    of_storage = bare or getattr(getattr(func, "value", None), "id", None) in (
                        "storage",
                        "config",
                    )
                    if name in callers and of_storage:
                        callers[name].append(f"{path.parent.name}/{path.name}:{node.name}")
    assert callers == {"storage_root": ["core/storage.py:resolve"], "resolve": ["core/session.py:start_ray"]}


def test_a_storage_value_is_plain_and_travels(tmp_path, monkeypatch):
    """The value a session carries: the setting as given, this learner's folder, and pickled whole (a
    fit's config sends it to workers) with nothing resolved again."""
    import pickle

    monkeypatch.setenv("COURSE_STORAGE", str(tmp_path / "runs"))
    monkeypatch.setenv("COURSE_LEARNER", "ada")
    store = st.resolve()
    assert (store.root, store.learner, store.mine) == (
        str((tmp_path / "runs").resolve()),
        "ada",
        str((tmp_path / "runs" / "course-ada").resolve()),
    )
    monkeypatch.setenv("COURSE_STORAGE", str(tmp_path / "elsewhere"))
    assert st.resolve().root != store.root and store.for_ray() == (store.mine, None)
    assert pickle.loads(pickle.dumps(store)) == store
