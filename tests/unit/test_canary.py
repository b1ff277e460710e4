"""./build.sh canary's pure parts: relaxing the pins, reading pytest's, run_course's and a bench's
output, and the one table it ends with. No install, no Ray."""

import json

from maintainer_tools import canary, run_course

REQUIREMENTS = """# comment stays
ray[default,train,data]==2.60.0
jsonschema==4.23.0
torch==2.14.1
torchvision==0.29.1
moto[server]==5.2.5
Py_Spy==0.4.3
"""


def test_relax_turns_pins_into_floors_but_keeps_torch_and_torchvision():
    relaxed = canary.relax_requirements(REQUIREMENTS).splitlines()
    assert relaxed == [
        "# comment stays",
        "ray[default,train,data]>=2.60.0",
        "jsonschema>=4.23.0",
        "torch==2.14.1",
        "torchvision==0.29.1",
        "moto[server]>=5.2.5",
        "Py_Spy>=0.4.3",
    ]
    assert canary.pinned_versions(REQUIREMENTS)["py-spy"] == "0.4.3"


def test_held_pins_stay_unless_relaxed_too():
    relaxed = canary.relax_requirements(REQUIREMENTS, canary.KEEP_PINNED | frozenset(canary.HELD))
    assert "jsonschema==4.23.0" in relaxed.splitlines() and "ray[default,train,data]>=2.60.0" in relaxed
    assert set(canary.HELD) <= set(
        canary.pinned_versions((canary.REPO_ROOT / "requirements.txt").read_text())
    )


def test_relax_on_the_real_requirements_keeps_every_package():
    text = "".join((canary.REPO_ROOT / name).read_text() for name in canary.REQUIREMENT_FILES)
    relaxed = canary.relax_requirements(text)
    assert "==" not in relaxed.replace("torch==", "").replace("torchvision==", "")
    assert set(canary.pinned_versions(text)) == {
        canary.normalise(line.split(">=")[0].split("[")[0]) for line in relaxed.splitlines() if ">=" in line
    } | {"torch", "torchvision"}


def test_the_canary_relaxes_and_installs_both_requirement_files(tmp_path, monkeypatch):
    """The lessons' packages and the tools its unit tests run on (pytest, nbmake): both files, relaxed."""
    assert canary.REQUIREMENT_FILES == ("requirements.txt", "requirements-dev.txt")
    commands = []
    monkeypatch.setattr(canary, "run", lambda command, *args, **kwargs: commands.append(command) or (0, ""))
    monkeypatch.setattr(canary, "installed_versions", lambda names: {n: "0" for n in names})
    report = canary.Report()
    assert canary.install(tmp_path, report)
    relaxed = (tmp_path / "requirements-canary.txt").read_text().splitlines()
    assert commands[0][-2:] == ["-r", str(tmp_path / "requirements-canary.txt")]
    for floor in ("ray[default,train,data]>=", "pytest>=", "nbmake>=", "jupyterlab>="):
        assert any(line.startswith(floor) for line in relaxed), floor
    assert "torch==2.14.1" in relaxed and "jsonschema==4.23.0" in relaxed  # kept, held
    assert report.steps[0].name == canary.INSTALL_STEP and report.steps[0].ok


def test_parse_pytest_counts_and_first_failure():
    green = "....\n===== 312 passed, 2 skipped in 95.31s (0:01:35) =====\n"
    step = canary.parse_pytest(green, 0)
    assert step.ok and step.detail == "312 passed, 2 skipped"
    red = (
        "..F.\nFAILED tests/unit/test_lint.py::test_ruff[format] - AssertionError: ruff\n"
        "FAILED tests/unit/test_x.py::test_y - KeyError\n= 1 failed, 3 passed in 2.0s =\n"
    )
    step = canary.parse_pytest(red, 1)
    assert step.ok is False
    assert (
        step.detail
        == "1 failed, 3 passed; first: FAILED tests/unit/test_lint.py::test_ruff[format] - AssertionError: ruff"
    )
    crash = canary.parse_pytest(
        "ImportError while loading conftest\nModuleNotFoundError: No module named 'ray'\n", 4
    )
    assert crash.ok is False and crash.detail == "pytest exited 4; ModuleNotFoundError: No module named 'ray'"


def test_parse_course_table_reads_run_courses_own_table():
    runs = [
        run_course.LessonRun("01_single_gpu_baseline", 52.4),
        run_course.LessonRun("04_fault_tolerance", 130.0, "06. Retries: TrainingFailedError: rank 1 / died"),
        run_course.LessonRun("05_inference", None, "DeadKernelError: Kernel died"),
    ]
    output = "01_single_gpu_baseline ... 52 s\n\n" + run_course.format_table(runs) + "\n\ntotal: 3.0 min\n"
    lessons = canary.parse_course_table(output)
    assert [(x.name, x.seconds, x.ok, x.error) for x in lessons] == [
        ("01_single_gpu_baseline", 52.0, True, ""),
        ("04_fault_tolerance", 130.0, False, "06. Retries: TrainingFailedError: rank 1 / died"),
        ("05_inference", None, False, "DeadKernelError: Kernel died"),
    ]
    assert canary.parse_course_table("Traceback ...\nImportError: x\n") == []


BENCH_OUTPUT = """2026-11-25 07:00:01,123 INFO worker.py:1900 -- Started a local Ray instance.
cores: 2
images_per_epoch: 4000
plain_pytorch_2_threads_images_per_s: 950
ray_train_2x1cpu_images_per_s: 700
(RayTrainWorker pid=123) epoch 0 done
best_ray_layout: ray_train_1x2cpu
ratio_ray_train_vs_plain: 1.10
"""


def test_parse_bench_keeps_name_value_lines_in_order():
    values = canary.parse_bench(BENCH_OUTPUT)
    assert list(values)[-1] == "ratio_ray_train_vs_plain" and values["ratio_ray_train_vs_plain"] == 1.10
    assert values["best_ray_layout"] == "ray_train_1x2cpu" and values["cores"] == 2.0
    assert "2026-11-25 07" not in " ".join(values)


def test_bench_rows_put_each_figure_beside_the_pinned_one():
    pinned = {"ray": "2.58.0", "measured": "2026-11-22", "figures": {"ray_train_2x1cpu_images_per_s": 716}}
    rows = canary.bench_steps("train", pinned, canary.parse_bench(BENCH_OUTPUT))
    assert [(r.name, r.pinned, r.canary) for r in rows] == [
        ("bench train: ray_train_2x1cpu_images_per_s", "716", "700"),
        ("bench train: ratio_ray_train_vs_plain", "", "1.1"),  # the bench's last line, not in the file
    ]
    assert rows[0].detail == "-2% vs pinned (Ray 2.58.0, 2026-11-22)" and rows[0].ok
    (failed,) = canary.bench_steps("train", pinned, {}, "exit 1: RuntimeError: boom")
    assert failed.ok is False and failed.detail == "exit 1: RuntimeError: boom"


# Figure names a bench builds at run time, and the f-string its source holds for them.
BUILT = {
    "plain_pytorch_2_threads_images_per_s": "plain_pytorch_{cores}_threads_images_per_s",
    "ray_train_2x1cpu_images_per_s": "ray_train_{workers}x{cpus}cpu",
    "ray_train_1x2cpu_images_per_s": "ray_train_{workers}x{cpus}cpu",
    "sync_wait_per_save_s": "{mode}_wait_per_save_s",
    "async_wait_per_save_s": "{mode}_wait_per_save_s",
    "sync_checkpoint_overhead_pct": "{mode}_checkpoint_overhead_pct",
    "async_checkpoint_overhead_pct": "{mode}_checkpoint_overhead_pct",
    "mean_wall_s_at_1_learners": "mean_wall_s_at_{n}_learners",
    "mean_wall_s_at_4_learners": "mean_wall_s_at_{n}_learners",
    "slowdown_at_2_learners": "slowdown_at_{n}_learners",
    "slowdown_at_3_learners": "slowdown_at_{n}_learners",
    "slowdown_at_4_learners": "slowdown_at_{n}_learners",
}


def test_the_canary_runs_every_bench():
    from maintainer_tools.bench.common import COMMANDS

    assert set(canary.BENCHES) == set(COMMANDS)


def test_pinned_figures_are_lines_the_benches_print():
    pinned = json.loads(canary.PINNED.read_text())["benches"]
    assert set(pinned) == set(canary.BENCHES)
    for name, bench in pinned.items():
        assert bench["ray"] and bench["measured"] and bench["figures"], name
        source = (canary.REPO_ROOT / "maintainer_tools" / "bench" / f"{name}.py").read_text()
        if name == "inference":
            source += (canary.REPO_ROOT / "course_utils" / "lesson05" / "inference_timing.py").read_text()
        for figure in bench["figures"]:
            literal = BUILT.get(figure, figure)
            if name == "ingest" and figure.endswith("_rows_per_s"):  # "{pipeline}_rows_per_s"
                literal = f'"{figure.removesuffix("_rows_per_s")}"'
            assert literal in source, f"pinned.json names {figure!r}, which bench {name} does not print"


def test_table_has_every_step_and_says_red_or_green():
    report = canary.Report()
    report.steps = [
        canary.Step(
            "install (requirements.txt, == relaxed to >=)", True, "2 newer", "ray 2.60.0", "ray 2.61.0"
        ),
        canary.parse_pytest("= 3 passed in 1.0s =", 0),
        canary.Step("lesson 04_fault_tolerance", False, "TrainingFailedError: a | b", canary="130 s"),
        canary.Step("bench train: ratio_ray_train_vs_plain", None, "not printed by the bench", "1.06"),
    ]
    table = canary.format_table(report)
    lines = table.splitlines()
    assert lines[0] == canary.TABLE_HEADER
    assert "| install (requirements.txt, == relaxed to >=) | ray 2.60.0 | ray 2.61.0 | ok: 2 newer |" in lines
    assert "| unit tests (tests/unit) |  |  | ok: 3 passed |" in lines
    assert "| lesson 04_fault_tolerance |  | 130 s | FAILED: TrainingFailedError: a / b |" in lines
    assert "not run: not printed by the bench" in table
    assert lines[-1] == "**canary RED**: 1 failed (lesson 04_fault_tolerance)" and report.failed
    report.steps.pop(2)
    assert canary.format_table(report).endswith("**canary green**") and not report.failed


def test_first_error_prefers_pips_error_then_the_traceback():
    assert canary.first_error("Collecting ray\nERROR: No matching distribution found for ray>=9\nmore") == (
        "ERROR: No matching distribution found for ray>=9"
    )
    assert canary.first_error(
        "Traceback (most recent call last):\n  File x\nray.exceptions.RayTaskError: boom\n"
    ) == ("ray.exceptions.RayTaskError: boom")
    assert canary.first_error("") == "no output"


def test_canary_imports_nothing_but_the_standard_library():
    # It runs before anything is installed: the standard library, and course_utils.core.install's name
    # normaliser, itself standard library only (it runs right after a lesson's pip install).
    import ast
    import sys

    def top_imports(path):
        tree = ast.parse(path.read_text())
        return {
            node.module if isinstance(node, ast.ImportFrom) else alias.name
            for node in tree.body
            if isinstance(node, ast.Import | ast.ImportFrom)
            for alias in node.names
        }

    stdlib = set(sys.stdlib_module_names) | {"__future__"}
    imported = top_imports(canary.REPO_ROOT / "maintainer_tools" / "canary.py")
    assert {name.split(".")[0] for name in imported} - {"course_utils"} <= stdlib, imported
    assert {name for name in imported if name.startswith("course_utils")} == {"course_utils.core.install"}
    install = top_imports(canary.REPO_ROOT / "course_utils" / "core" / "install.py")
    assert {name.split(".")[0] for name in install} <= stdlib, install


def test_the_canary_runs_every_lesson_alone_colab_shaped(monkeypatch, tmp_path):
    calls = []

    def fake_run(command, log, timeout, env):
        calls.append((command, env))
        return (
            1,
            "FAILED tests/colab_tier/test_colab.py::test_a_lesson_alone[04] - boom\n1 failed, 5 passed in 901.2s",
        )

    monkeypatch.setattr(canary, "run", fake_run)
    report = canary.Report()
    canary.colab_lessons(tmp_path, report)
    ((command, env),) = calls
    assert "tests/colab_tier" in command and env["COURSE_COLAB_LESSONS"] == "all"
    (step,) = report.steps
    assert step.name.startswith("Colab-shaped") and step.ok is False
    assert "1 failed, 5 passed" in step.detail and "[04]" in step.detail
