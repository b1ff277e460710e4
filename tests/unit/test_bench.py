"""Unit tests for course_utils.bench: the dispatcher finds every benchmark and each parses its own
options; the ingest benchmark's DataLoader baseline decodes like the lesson's transform. No Ray
cluster: only ``--help`` runs, and the benchmarks themselves are never timed in tests."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from course_utils import bench, data, raydata
from course_utils.bench.ingest import DigitsDataset

# One option each benchmark's --help must show: proof the subcommand reached its own parser.
OPTIONS = {
    "train": "--epochs",
    "ingest": "--rows",
    "recovery": "--checkpoint-every",
    "checkpoint": "--checkpoint-every",
    "validation": "--test-size",
    "inference": "--pool-size",
}


def test_every_benchmark_is_dispatched():
    assert set(bench.COMMANDS) == set(OPTIONS)


@pytest.mark.parametrize("name", sorted(OPTIONS))
def test_each_benchmark_parses_its_own_options(name, capsys):
    with pytest.raises(SystemExit) as helped:
        bench.main([name, "--help"])
    assert helped.value.code == 0
    assert OPTIONS[name] in capsys.readouterr().out


def test_unknown_benchmark_is_a_usage_error():
    with pytest.raises(SystemExit) as unknown:
        bench.main(["no-such-bench"])
    assert unknown.value.code == 2


def test_python_dash_m_runs_the_dispatcher():
    out = subprocess.run(
        [sys.executable, "-m", "course_utils.bench", "--help"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert "train" in out.stdout and "inference" in out.stdout


def test_digits_dataset_matches_vectorised_transform(mnist_root):
    images, labels = data.raw_arrays(True, 16, mnist_root)
    image, label = DigitsDataset(images, labels)[3]
    fast = raydata.normalise_batch({"image": images[3:4], "label": labels[3:4]})
    np.testing.assert_allclose(image.numpy(), fast["image"][0], rtol=0, atol=1e-6)
    assert label == labels[3]
