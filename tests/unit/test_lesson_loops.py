"""The code a lesson shows is the code it teaches: the functions each lesson displays with
``show_source`` contain the calls the lesson is about, and nothing of another lesson's."""

import importlib
import importlib.util
import inspect
import json
import re

import pytest

from maintainer_tools import export
from maintainer_tools.harness.notebook_runs import LESSONS

SHOWN = re.compile(r"show_source\(([\w.]+)\)")
# `from course_utils.x import a, b` or the same wrapped in parentheses over several lines
IMPORTED = re.compile(r"from course_utils\.([\w.]+) import (?:\(([\w,\s]+)\)|([\w, ]+))")

# lesson -> calls the shown code must contain
TEACHES = {
    "01": ["model(inputs)", "F.cross_entropy", "loss.backward()", "optimizer.step()", "model.eval()"],
    "02": [
        "ray.train.torch.prepare_model",
        "ray.train.torch.prepare_data_loader",
        'config["batch_size"] // world',
        "sampler.set_epoch(epoch)",
        "ray.train.report(metrics, checkpoint=checkpoint)",
        "ray.train.Checkpoint.from_directory(",
        "dist.all_reduce(",
    ],
    "03": [
        "ray.train.get_dataset_shard",
        "iter_torch_batches(",
        "ray.train.report(metrics, checkpoint=checkpoint)",
    ],
    "04": [
        "ray.train.get_checkpoint()",
        "load_state_dict",
        "start_epoch",
        "fault(rank=rank, epoch=epoch, step=step)",  # section 03: the driver's planted crashes
        "loader.state_dict()",  # section 12: the mid-epoch loop saves and restores its place
        "loader.load_state_dict(",
    ],
}
# lesson -> words that belong to other lessons (or to no lesson) and must not appear in what it shows
NOT_HERE = {
    "01": ["fault", "bench", "on_step", "after_step", "ray."],
    "02": ["fault", "bench", "get_checkpoint", "restore", "on_step"],
    "03": ["fault", "bench", "get_checkpoint", "restore", "RowCounter", "_mean_across"],
    "04": ["bench"],
}


def shown_sources(lesson) -> dict[str, str]:
    """{name: source} of every object the lesson passes to show_source, resolved as the lesson does,
    and of every function its ``#@save`` cells define (written in the lesson itself)."""
    nb = json.loads(lesson.read_text())
    code = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")
    imported = {
        name.strip(): module
        for module, wrapped, names in IMPORTED.findall(code)
        for name in (wrapped or names).split(",")
        if name.strip()
    }
    out = {}
    for name in SHOWN.findall(code):
        first, *attrs = name.split(".")  # `loop`, `module.loop` or `Class.method`, `module.Class.method`
        if first in imported:  # a function of a module, or a module of a room (course_utils.core)
            home = importlib.import_module(f"course_utils.{imported[first]}")
            is_module = hasattr(home, "__path__") and importlib.util.find_spec(f"{home.__name__}.{first}")
            obj = importlib.import_module(f"{home.__name__}.{first}") if is_module else getattr(home, first)
        else:
            obj = importlib.import_module(f"course_utils.{first}")
        for attr in attrs:
            obj = getattr(obj, attr)
        out[name] = inspect.getsource(obj)
    for cell in export.saved_cells():
        if cell.lesson == lesson.name:
            out.update(dict.fromkeys(cell.names, cell.code))
    return out


def problems(number: str, sources: dict[str, str]) -> list[str]:
    """What is wrong with what lesson ``number`` shows: calls it teaches but does not show, and
    words of other lessons inside a shown loop (docstrings and comments aside)."""
    loops = {
        name: src for name, src in sources.items() if "for " in src and ("train" in name or "loop" in name)
    }
    if not loops:
        return [f"lesson {number} shows no training loop"]
    everything = "\n".join(sources.values())
    out = [
        f"lesson {number} teaches {call} but does not show it"
        for call in TEACHES[number]
        if call not in everything
    ]
    for name, src in loops.items():
        body = src.split('"""')[-1]
        code = "\n".join(line.split("#")[0] for line in body.splitlines())
        out += [f"lesson {number}'s {name} carries {word!r}" for word in NOT_HERE[number] if word in code]
    return out


@pytest.mark.parametrize("number", sorted(TEACHES))
def test_the_shown_loop_holds_the_lessons_calls_and_no_other_lessons(number):
    lesson = next(p for p in LESSONS if p.name.startswith(number))
    assert problems(number, shown_sources(lesson)) == []


def test_a_loop_with_another_lessons_business_is_caught():
    from course_utils import lesson_code

    lesson04_loop = inspect.getsource(lesson_code.train_loop_resumable)
    found = problems("02", {"train_loop_resumable": lesson04_loop})
    assert "lesson 02's train_loop_resumable carries 'fault'" in found
    assert "lesson 02's train_loop_resumable carries 'get_checkpoint'" in found
    found = problems("03", {"train_loop_ray_data": inspect.getsource(lesson_code.train_loop_ray_data)})
    assert found == [], "lesson 03's own loop passes lesson 03's rules"
    assert problems("01", {"train_loop": "def train_loop():\n    for x in y:\n        pass\n"})[0].startswith(
        "lesson 01 teaches model(inputs)"
    )
