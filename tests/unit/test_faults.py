"""Fault injection, safe checkpoint writing, the run preflight and the resumable loader (no Ray)."""

from __future__ import annotations

import json
import os
import shutil

import pytest
import torch
from torch.utils.data import TensorDataset

from course_utils.core import checkpoints
from course_utils.core import storage as runs  # the `storage` fixture is a folder
from course_utils.core.storage import resolve as resolve_storage
from course_utils.lesson04 import faults, resumable


def test_crash_once_rejects_unknown_modes(tmp_path):
    with pytest.raises(ValueError) as how:
        faults.crash_once(tmp_path / "m", how="explode")
    with pytest.raises(ValueError) as during:
        faults.crash_once(tmp_path / "m", during="lunch")
    assert "external" in str(how.value)
    assert "checkpoint" in str(during.value)


def test_in_loop_fault_fires_once_at_its_step(tmp_path):
    spec = faults.crash_once(tmp_path / "m", rank=1, epoch=1, step=3)
    faults.maybe_fail(spec, rank=0, epoch=1, step=3)  # other rank
    faults.maybe_fail(spec, rank=1, epoch=1, step=2)  # other step
    assert not faults.fired(spec)
    with pytest.raises(faults.InjectedFault) as err:
        faults.maybe_fail(spec, rank=1, epoch=1, step=3)
    assert "epoch 1, step 3" in str(err.value)
    assert faults.fired(spec)
    faults.maybe_fail(spec, rank=1, epoch=1, step=3)  # a restarted worker passes: fires once


@pytest.mark.parametrize("where", ["local folder", "s3"])
def test_markers_in_the_course_storage_fire_once_for_every_process(where, storage, request):
    """A marker is read and written through the storage's filesystem, which travels pickled (as
    Ray ships ``train_loop_config``): a rank restarted on another machine sees the fault as fired."""
    import pickle

    if where == "s3":
        request.getfixturevalue("s3_storage")
    markers = faults.Markers(resolve_storage(), "lesson04-markers").clear()
    spec = pickle.loads(pickle.dumps(faults.crash_once(markers / "crash", rank=1, epoch=1, step=0)))
    assert spec["marker"].endswith("/lesson04-markers/crash") and not faults.fired(spec)
    with pytest.raises(faults.InjectedFault):
        faults.maybe_fail(spec, rank=1, epoch=1, step=0)
    elsewhere = pickle.loads(pickle.dumps(spec))  # the restarted rank's copy of the config
    faults.maybe_fail(elsewhere, rank=1, epoch=1, step=0)  # fired already: passes
    assert faults.fired(faults.crash_once(markers / "crash"))
    fs, beside = markers.filesystem, markers.path.rsplit("/", 1)[0] + "/my-notes.txt"
    with fs.open_output_stream(beside) as f:
        f.write(b"the learner's own file")
    markers.clear()
    assert not faults.fired(spec), "clear() removes this lesson's markers"
    assert fs.get_file_info(beside).type == runs.pafs.FileType.File, "and nothing beside them"


def test_a_list_of_faults_fires_each_once(tmp_path):
    specs = [faults.crash_once(tmp_path / "a", epoch=1), faults.crash_once(tmp_path / "b", epoch=2)]
    with pytest.raises(faults.InjectedFault):
        faults.maybe_fail(specs, rank=1, epoch=1, step=0)
    faults.maybe_fail(specs, rank=1, epoch=1, step=0)
    with pytest.raises(faults.InjectedFault):
        faults.maybe_fail(specs, rank=1, epoch=2, step=0)
    assert all(faults.fired(s) for s in specs)


def test_inject_passes_batches_through_and_fires_before_its_step(tmp_path):
    spec = faults.crash_once(tmp_path / "m", rank=1, epoch=2, step=5)
    assert list(faults.inject(range(8), None, rank=1, epoch=2)) == list(range(8))  # no fault: unchanged
    assert list(faults.inject(range(8), spec, rank=0, epoch=2)) == list(range(8))  # another rank
    trained = []
    with pytest.raises(faults.InjectedFault) as err:
        # resumed at step 3: the batches are steps 3, 4, 5, ...; the fault fires before step 5 trains
        for batch in faults.inject(["b3", "b4", "b5", "b6"], spec, rank=1, epoch=2, first_step=3):
            trained.append(batch)
    assert trained == ["b3", "b4"] and "epoch 2, step 5" in str(err.value)
    assert list(faults.inject(range(8), spec, rank=1, epoch=2)) == list(range(8))  # fired once


def test_external_fault_only_announces_the_pid(tmp_path):
    spec = {**faults.crash_once(tmp_path / "m", rank=0, epoch=0, step=1, how="external"), "hold_s": 0}
    faults.maybe_fail(spec, rank=0, epoch=0, step=1)  # waits to be killed, then goes on: no raise
    assert (tmp_path / "m").read_text().split() == [str(os.getpid())]


def test_checkpoint_fault_fires_only_while_writing(tmp_path):
    spec = faults.crash_once(tmp_path / "m", rank=0, epoch=0, step=4, during="checkpoint")
    faults.maybe_fail(spec, rank=0, epoch=0, step=4)  # the training step itself: no
    assert not faults.fired(spec)
    with pytest.raises(faults.InjectedFault):
        faults.maybe_fail(spec, rank=0, epoch=0, step=4, during="checkpoint")


def test_external_killer_needs_an_external_spec_and_reports_a_timeout(tmp_path):
    with pytest.raises(ValueError):
        faults.ExternalKiller(faults.crash_once(tmp_path / "m"))
    killer = faults.ExternalKiller(
        faults.crash_once(tmp_path / "never", how="external"), timeout_s=0.3, poll_s=0.05
    ).start()
    with pytest.raises(RuntimeError) as err:
        killer.join(5)
    assert "within" in str(err.value)
    assert not killer.fired


def test_crash_while_writing_leaves_nothing_loadable_to_report(tmp_path):
    state = {"model": {"w": torch.ones(3)}, "epoch": 1, "history": []}

    def crash():
        raise faults.InjectedFault("died mid-write")

    with pytest.raises(faults.InjectedFault):
        checkpoints.write_checkpoint_dir(state, tmp_path / "ckpt", before_commit=crash)
    assert not (tmp_path / "ckpt" / checkpoints.STATE_FILE).exists()
    assert (tmp_path / "ckpt" / (checkpoints.STATE_FILE + ".partial")).exists()
    with pytest.raises(checkpoints.CheckpointError):
        checkpoints.load_state(tmp_path / "ckpt")
    good = checkpoints.write_checkpoint_dir(state, tmp_path / "ok")
    assert torch.equal(checkpoints.load_state(good)["model"]["w"], torch.ones(3))


def _fake_run(root, name="run", epochs=2):
    """A run directory shaped like Ray Train's: checkpoint folders plus the manager snapshot."""
    run = root / name
    names = []
    for epoch in range(epochs):
        ckpt = f"checkpoint_2026-11-21_00-00-0{epoch}.000000"
        checkpoints.write_checkpoint_dir({"model": {}, "epoch": epoch, "history": []}, run / ckpt)
        names.append(ckpt)
    results = [{"version": 0, "checkpoint_dir_name": n, "metrics": {"epoch": i}} for i, n in enumerate(names)]
    snapshot = {
        "ray_version": "2.58.0",
        "checkpoint_results": results,
        "checkpoint_report_indices": list(range(epochs)),
        "latest_checkpoint_result": results[-1],
    }
    (run / runs.SNAPSHOT_FILE).write_text(json.dumps(snapshot))
    return run, names


def test_check_run_accepts_a_whole_run_and_a_missing_one(storage):
    run, names = _fake_run(storage)
    info = runs.resolve().check_run("run")
    assert info["latest"] == names[-1]
    assert info["latest_metrics"] == {"epoch": 1}
    assert runs.resolve().check_run("never-trained") is None


@pytest.mark.parametrize(
    "damage", ["truncated snapshot", "deleted checkpoint", "truncated state", "no snapshot"]
)
def test_check_run_names_the_damage(storage, damage):
    run, names = _fake_run(storage)
    if damage == "truncated snapshot":
        text = (run / runs.SNAPSHOT_FILE).read_text()
        (run / runs.SNAPSHOT_FILE).write_text(text[: len(text) // 2])
    elif damage == "deleted checkpoint":
        shutil.rmtree(run / names[0])
    elif damage == "truncated state":
        path = run / names[-1] / checkpoints.STATE_FILE
        path.write_bytes(path.read_bytes()[:100])
    else:
        (run / runs.SNAPSHOT_FILE).unlink()
    with pytest.raises(runs.RunCorruptedError) as err:
        runs.resolve().check_run("run")
    message = str(err.value)
    assert "reset_run('run')" in message
    expected = {
        "truncated snapshot": "unreadable",
        "deleted checkpoint": "missing",
        "truncated state": "does not load",
        "no snapshot": "silently train from scratch",
    }[damage]
    assert expected in message


def test_expected_indices_cover_every_sample_once_per_epoch():
    plan = resumable.expected_indices(100, world=2, epochs=2, seed=0)
    for epoch in plan:
        flat = [i for rank in epoch for i in rank]
        assert sorted(flat) == list(range(100))
    assert plan[0] != plan[1]  # set_epoch reshuffles


def test_stateful_loader_resumes_at_the_exact_batch():
    dataset = TensorDataset(torch.arange(40).float(), torch.arange(40))

    def run(stop_after=None, state=None):
        from torch.utils.data import DistributedSampler
        from torchdata.stateful_dataloader import StatefulDataLoader

        # lesson 04's mid-epoch loader, as section 12 builds it; each sample's label is its index
        sampler = DistributedSampler(dataset, num_replicas=2, rank=1, shuffle=True, seed=0)
        loader = StatefulDataLoader(dataset, batch_size=4, sampler=sampler)
        loader.sampler.set_epoch(3)
        if state is not None:
            loader.load_state_dict(state)
        read = []
        for step, (_, labels) in enumerate(loader):
            read += labels.tolist()
            if stop_after is not None and step + 1 == stop_after:
                return read, loader.state_dict()
        return read, None

    uninterrupted, _ = run()
    first, state = run(stop_after=2)
    rest, _ = run(state=state)
    assert first + rest == uninterrupted
    assert len(first) == 8
    assert uninterrupted == resumable.expected_indices(40, world=2, epochs=4)[3][1]


def test_settle_s_is_two_of_the_controllers_polls(monkeypatch):
    monkeypatch.setenv("RAY_TRAIN_HEALTH_CHECK_INTERVAL_S", "0.5")  # the smoke profile's
    assert faults.settle_s() == 1.0
    monkeypatch.delenv("RAY_TRAIN_HEALTH_CHECK_INTERVAL_S")
    assert faults.settle_s() == 4.0  # Ray's default: a poll every 2 s


def test_a_planted_fault_is_a_callable_that_fires_once_where_it_was_planted(tmp_path):
    # what lesson 04's loop calls before each step: config["fault"](rank=..., epoch=..., step=...)
    import pickle

    spec = faults.crash_once(tmp_path / "marker", rank=1, epoch=0, step=2)
    planted = pickle.loads(pickle.dumps(faults.planted(spec)))  # as it reaches a worker
    planted(rank=0, epoch=0, step=2)  # another rank: nothing
    planted(rank=1, epoch=0, step=1)  # another step: nothing
    with pytest.raises(faults.InjectedFault):
        planted(rank=1, epoch=0, step=2)
    planted(rank=1, epoch=0, step=2)  # fired once: the marker stays
    assert faults.fired(spec)
