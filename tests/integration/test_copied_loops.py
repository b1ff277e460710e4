"""The loops a lesson teaches run copied into a project of one's own, where only torch, torchvision and ray are
installed: each ``#@save`` cell, its own imports at its top as the lesson shows it, goes alone into one file
(after the few lines of a learner's driver script), which a fresh Python runs with ``course_utils`` unimportable, in the driver and in every Ray
worker (a package of that name that refuses to import comes first on their ``PYTHONPATH``), then fits it for
real: 2 workers, 1 short epoch, MNIST from torchvision's folder (lesson 01's loop: one process; lesson 05's actor
and pipeline: 300 digits)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from maintainer_tools import export
from maintainer_tools.harness.notebook_runs import LAPTOP

pytestmark = [pytest.mark.integration, pytest.mark.path(LAPTOP)]

# What a copied file may import: the standard library and these (the issue's list, and the lessons' promise).
ALLOWED = {"ray", "torch", "torchvision", "torchdata", "numpy", "pyarrow"}
REFUSING = 'raise ModuleNotFoundError("course_utils is not installed in this project", name="course_utils")\n'

# A learner's driver script: what it needs around the cell (the cell imports what the cell itself uses).
DRIVER_IMPORTS = """import json

import ray
import ray.data
import torch
from ray.train import RunConfig, ScalingConfig
from ray.train.torch import TorchTrainer
from torchvision import datasets
"""

# After each cell: the driver code that runs it, as a learner's script would. CONFIG, DATA_ROOT and STORAGE
# come first in the file; the cell's own names are used as the lesson defines them.
CHECK_WORKERS = """
@ray.remote
def worker_imports_course_utils() -> bool:
    try:
        import course_utils  # noqa: F401
    except ModuleNotFoundError:
        return False
    return True

assert not ray.get(worker_imports_course_utils.remote()), "course_utils imports in a Ray worker"
"""
FIT = """
result = TorchTrainer(
    {loop},
    train_loop_config=CONFIG,
    scaling_config=ScalingConfig(num_workers=2),
    run_config=RunConfig(name="copied-{loop}", storage_path=STORAGE),{datasets}
).fit()
print("COPIED", json.dumps({{"metrics": result.metrics, "checkpoint": bool(result.checkpoint)}}))
"""
# Lesson 03's pipeline is not one of its #@save cells: here it is the digits as Ray Data rows, as normalised.
DIGITS_AS_ROWS = """
digits = datasets.MNIST(DATA_ROOT, train=True)
pixels = ((digits.data[:256].float() / 255 - 0.1307) / 0.3081).unsqueeze(1).numpy()
rows = [{"image": pixels[i], "label": int(digits.targets[i])} for i in range(len(pixels))]
"""
# Lesson 05's actor and pipeline serve a checkpoint as lesson 02's loop writes it (state.pt with "model").
CHECKPOINT_AND_DIGITS = """
import os
import torchvision
model = torchvision.models.resnet18(num_classes=10)
model.conv1 = torch.nn.Conv2d(1, 64, kernel_size=7, stride=2, padding=3, bias=False)
os.makedirs(STORAGE)
torch.save({"model": model.state_dict()}, os.path.join(STORAGE, "state.pt"))
checkpoint = ray.train.Checkpoint.from_directory(STORAGE)
test_digits = torchvision.datasets.MNIST(DATA_ROOT, train=False)
images, labels = test_digits.data[:300].numpy(), test_digits.targets[:300].numpy()
"""
ACTOR = """
worker = start_model_worker(checkpoint)
predicted = ray.get(worker.predict.remote(images))
print("COPIED", json.dumps({"predictions": predicted.tolist(), "info": ray.get(worker.info.remote())}))
"""
PIPELINE = """
rows = [{"image": images[i], "label": int(labels[i])} for i in range(len(labels))]
scored = batch_predict(
    ray.data.from_items(rows), checkpoint, BatchPredictor, pool_size=1, batch_size=64, num_cpus=1
).take_all()
print("COPIED", json.dumps({"predictions": [int(r["prediction"]) for r in scored]}))
"""
# Lesson 01's loop runs in the script's own process, on one device: no Ray at all.
ONE_PROCESS = {"train_baseline"}
BASELINE = """
import os
os.makedirs(STORAGE)
rows = train_baseline(dict(CONFIG, epochs=1), STORAGE)
print("COPIED", json.dumps({"rows": rows, "files": sorted(os.listdir(STORAGE))}))
"""
RUNS = {
    "train_baseline": BASELINE,
    "train_loop_per_worker": FIT.format(loop="train_loop_per_worker", datasets=""),
    "train_loop_resumable": FIT.format(loop="train_loop_resumable", datasets=""),
    # 4 steps an epoch on each worker: a mid-epoch save after step 2, asynchronous (the loop's default)
    "train_loop_mid_epoch": "CONFIG['checkpoint_every'] = 2\n"
    + FIT.format(loop="train_loop_mid_epoch", datasets=""),
    "train_loop_ray_data": DIGITS_AS_ROWS
    + FIT.format(loop="train_loop_ray_data", datasets='\n    datasets={"train": ray.data.from_items(rows)},'),
    "ModelWorker": CHECKPOINT_AND_DIGITS + ACTOR,
    "BatchPredictor": CHECKPOINT_AND_DIGITS + PIPELINE,
}


def copied_cells() -> list[tuple[str, export.SavedCell]]:
    return [(name, cell) for cell in export.saved_cells() for name in cell.names if name in RUNS]


@pytest.mark.parametrize("name, cell", copied_cells(), ids=[name for name, _ in copied_cells()])
def test_a_lessons_loop_runs_copied_alone_into_a_project(name, cell, mnist_root, tmp_path):
    tops = {line.split()[1].split(".")[0] for line in cell.imports}
    assert cell.imports and tops <= ALLOWED | set(sys.stdlib_module_names), (
        f"{cell.where()}: it imports {sorted(tops - ALLOWED - set(sys.stdlib_module_names))}, "
        "which a project of one's own would not have (or imports nothing at its top)"
    )
    shadow = tmp_path / "shadow" / "course_utils"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text(REFUSING)
    script = tmp_path / f"{name}.py"
    script.write_text(
        "\n".join(
            [
                DRIVER_IMPORTS,
                f"CONFIG = {{'batch_size': 64, 'seed': 0, 'lr': 1e-3, 'epochs': 1, 'train_size': 256,"
                f" 'test_size': 128, 'shuffle_buffer': 64, 'data_root': {str(mnist_root)!r}}}",
                f"DATA_ROOT, STORAGE = CONFIG['data_root'], {str(tmp_path / 'storage')!r}",
                "",
                "\n".join(cell.imports),  # the cell as the lesson shows it: its imports, then its code
                cell.code,
                "try:\n    import course_utils  # noqa: F401\n    raise SystemExit('course_utils imports in the driver')"
                "\nexcept ModuleNotFoundError:\n    pass",
                *(
                    ()
                    if name in ONE_PROCESS
                    else ("ray.init(num_cpus=4, include_dashboard=False)", CHECK_WORKERS)
                ),
                textwrap.dedent(RUNS[name]),
            ]
        )
    )
    # a project of one's own: none of the settings the course's start_ray leaves in this process (Ray's
    # worker set-up hook that imports course_utils, log levels, RAY_ADDRESS) nor COURSE_*
    env = {k: v for k, v in os.environ.items() if not k.lstrip("_").startswith(("RAY_", "COURSE_"))}
    env["PYTHONPATH"] = str(shadow.parent)
    run = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )
    printed = run.stdout + run.stderr
    assert run.returncode == 0, f"{cell.where()} copied alone into {script} failed:\n{printed[-4000:]}"
    (line,) = [line for line in run.stdout.splitlines() if line.startswith("COPIED ")]
    copied = json.loads(line.split(" ", 1)[1])
    if "metrics" in copied:  # a loop: a fit on 2 workers that reported and checkpointed
        print(f"{cell.where()}, copied alone: {copied['metrics']}")
        assert copied["checkpoint"] and copied["metrics"]["world_size"] == 2, copied
        assert 0.0 <= copied["metrics"]["accuracy"] <= 1.0 and copied["metrics"]["epoch"] == 0, copied
    elif "rows" in copied:  # lesson 01's loop: an epoch's metrics, and its files
        print(f"{cell.where()}, copied alone: {copied}")
        assert [row["epoch"] for row in copied["rows"]] == [0], copied
        assert copied["files"] == ["metrics.csv", "model.pt"], copied
    else:  # the actor or the pipeline: a digit for each of the 300
        predictions = copied["predictions"]
        print(f"{cell.where()}, copied alone: {len(predictions)} predictions, {copied.get('info', '')}")
        assert len(predictions) == 300 and set(predictions) <= set(range(10)), copied
