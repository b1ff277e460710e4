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
