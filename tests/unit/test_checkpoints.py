import json
import os
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from course_utils.core import checkpoints
from course_utils.core.model import build_resnet18


def _state():
    model = build_resnet18()
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.zeros(2, 1, 28, 28)).sum().backward()
    optimizer.step()
    return model, optimizer, checkpoints.training_state(model, optimizer, 3, [{"epoch": 3, "accuracy": 0.9}])


def test_write_and_load_round_trip(tmp_path):
    model, optimizer, state = _state()
    directory = checkpoints.write_checkpoint_dir(state, tmp_path / "ckpt")
    loaded = checkpoints.load_state(directory)
    assert loaded["epoch"] == 3
    assert torch.equal(loaded["model"]["conv1.weight"], model.state_dict()["conv1.weight"])
    assert json.loads((directory / checkpoints.HISTORY_FILE).read_text()) == [{"epoch": 3, "accuracy": 0.9}]
    assert not list(directory.glob("*.partial"))


@pytest.fixture
def temp_root(monkeypatch, tmp_path):
    """The folder new_temp_dir creates its folders in, for this test alone."""
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    return tmp_path / "tmp"


def test_default_directory_is_a_fresh_temp_dir(temp_root):
    _, _, state = _state()
    a, b = checkpoints.write_checkpoint_dir(state), checkpoints.write_checkpoint_dir(state)
    assert a != b and (a / checkpoints.STATE_FILE).exists() and a.parent == temp_root


def test_truncated_checkpoint_is_a_clear_error(tmp_path):
    _, _, state = _state()
    directory = checkpoints.write_checkpoint_dir(state, tmp_path)
    path = directory / checkpoints.STATE_FILE
    path.write_bytes(path.read_bytes()[:1000])
    with pytest.raises(checkpoints.CheckpointError, match="cannot be loaded"):
        checkpoints.load_state(directory)


def test_missing_state_is_a_clear_error(tmp_path):
    with pytest.raises(checkpoints.CheckpointError, match="incomplete"):
        checkpoints.load_state(tmp_path)


def test_rng_state_round_trip():
    state = checkpoints.rng_state()
    expected = (random.random(), np.random.rand(), torch.rand(1).item())
    checkpoints.set_rng_state(state)
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == expected


def test_load_model_from_dir_and_file(tmp_path):
    model, _, state = _state()
    directory = checkpoints.write_checkpoint_dir(state, tmp_path / "dir")
    torch.save(model.state_dict(), tmp_path / "model.pt")
    for source in (directory, tmp_path / "model.pt"):
        loaded = checkpoints.load_model(source)
        assert torch.equal(loaded.state_dict()["fc.weight"], model.state_dict()["fc.weight"])
        assert not loaded.training


def test_training_state_holds_what_resumption_needs():
    _, _, state = _state()
    assert {"model", "optimizer", "epoch", "history", "rng"} <= set(state)


def test_rank0_checkpoint_only_on_rank_0_and_gone_after_report():
    state = checkpoints.training_state(build_resnet18(), None, 2, [{"epoch": 2}])
    with checkpoints.rank0_checkpoint(1, state) as other:
        assert other is None, "ranks other than 0 attach no checkpoint"
    with checkpoints.rank0_checkpoint(0, state) as checkpoint:
        from pathlib import Path

        folder = Path(checkpoint.path)
        assert checkpoints.load_state(checkpoint)["epoch"] == 2, "a whole, loadable checkpoint"
    assert not folder.exists(), "the temp dir is removed once report has copied it"


def test_rank0_checkpoint_never_yields_a_half_written_checkpoint(tmp_path, temp_root):
    def crash():
        raise RuntimeError("died while writing")

    state = checkpoints.training_state(build_resnet18(), None, 0, [])
    with pytest.raises(RuntimeError, match="died while writing"):  # lesson 04's crash inside the write
        checkpoints.write_checkpoint_dir(state, tmp_path / "crashed", before_commit=crash)
    assert [p.name for p in (tmp_path / "crashed").iterdir()] == [checkpoints.STATE_FILE + ".partial"]
    calls = []
    with pytest.raises(RuntimeError, match="died while writing"):  # the same hook, inside rank0_checkpoint
        with checkpoints.rank0_checkpoint(0, state, before_commit=crash):
            calls.append("reported")
    assert calls == [], "a checkpoint whose write crashed is never handed to report"
    assert list(temp_root.iterdir()) == [], "nor left on disk"
    with checkpoints.rank0_checkpoint(0, state) as written:
        assert (Path(written.path) / checkpoints.STATE_FILE).exists()
    assert list(temp_root.iterdir()) == [], "a reported checkpoint's folder goes once report returns"
    with checkpoints.rank0_checkpoint(1, state, before_commit=crash) as other:
        assert other is None, "other ranks write nothing, so their hook never runs"


def test_save_wait_times_both_ways_and_leaves_nothing_behind(tmp_path):
    state = checkpoints.training_state(build_resnet18(), None, 0, [])
    waits = checkpoints.save_wait_s(state, tmp_path, rounds=1)
    assert set(waits) == {"sync", "async"} and all(0 < w < 60 for w in waits.values())
    assert list(tmp_path.iterdir()) == []  # the copies are removed


def test_orphaned_temp_dirs_of_dead_processes_are_swept_and_nothing_else(tmp_path):
    import subprocess
    import sys

    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    dead_pid = int(dead.stdout)  # a process that has exited
    orphan = tmp_path / f"{checkpoints.TEMP_PREFIX}{dead_pid}-abc"
    mine = tmp_path / f"{checkpoints.TEMP_PREFIX}{os.getpid()}-def"  # this process may still upload it
    old_style = tmp_path / f"{checkpoints.TEMP_PREFIX}xyz"  # no pid: whose it is cannot be told
    other = tmp_path / f"someone-else-{dead_pid}-x"
    for folder in (orphan, mine, old_style, other):
        folder.mkdir()
        (folder / checkpoints.STATE_FILE).write_bytes(b"x")
    assert checkpoints.sweep_orphaned_temp_dirs(tmp_path) == [orphan]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in (mine, old_style, other))


def test_a_new_temp_dir_names_its_process():
    folder = checkpoints.new_temp_dir()
    try:
        assert folder.name.startswith(f"{checkpoints.TEMP_PREFIX}{os.getpid()}-") and folder.is_dir()
    finally:
        folder.rmdir()
