"""The check every lesson item applies to its executed output (conftest.LessonItem)."""


def test_alarming_output_flags_tracebacks_and_report_dumps_unless_on_purpose():
    import nbformat

    from maintainer_tools.harness.notebook_runs import FAILURES_ON_PURPOSE, alarming_output

    def cell(source, text):
        c = nbformat.v4.new_code_cell(source)
        c.outputs = [nbformat.v4.new_output("stream", name="stderr", text=text)]
        return c

    cleaner = (
        "\x1b[36m(PlacementGroupCleaner pid=1)\x1b[0m Traceback (most recent call last):\n"
        '\x1b[36m(PlacementGroupCleaner pid=1)\x1b[0m   File "x.py", line 1, in f\n'
        "\x1b[36m(PlacementGroupCleaner pid=1)\x1b[0m ray.exceptions.RpcError: Timed out\n"
    )
    report = "(RayTrainWorker pid=2) Reporting training result 1: TrainingReport(checkpoint=None, ...)\n"
    nb = nbformat.v4.new_notebook(
        cells=[cell("# 07. fit", cleaner + report), cell("# 08. fine", "epoch 0\n")]
    )
    found = alarming_output(nb, "02_ray_train_migration.ipynb")
    assert len(found) == 4, found
    assert "4 line(s) on stderr" in found[0] and "ray.exceptions.RpcError: Timed out" in found[1]
    assert "TrainingReport(" in found[2] and "cell 1 ('# 08. fine'): 1 line(s) on stderr" in found[3]
    # Announced before its cell: lesson 03's split demo warning where the demo waits for it, nothing else there.
    split = "(SplitCoordinator pid=3) StreamSplitDataIterator(epoch=-1, split=0) blocked waiting on other clients\n"
    fit = "# 17. Going further: the warning, the stacks and a bounded wait"
    assert (
        alarming_output(nbformat.v4.new_notebook(cells=[cell(fit, split)]), "03_ray_data_integration.ipynb")
        == []
    )
    spill = "(raylet) Spilled 2209 MiB, 103 objects\n"
    assert alarming_output(
        nbformat.v4.new_notebook(cells=[cell(fit, split + spill)]), "03_ray_data_integration.ipynb"
    )
    on_purpose = FAILURES_ON_PURPOSE["04_fault_tolerance.ipynb"][0]
    nb = nbformat.v4.new_notebook(cells=[cell(on_purpose + "\nfit()", cleaner)])
    assert alarming_output(nb, "04_fault_tolerance.ipynb") == []  # that cell shows a failure on purpose
    assert alarming_output(nb, "02_ray_train_migration.ipynb") != []  # the same cell elsewhere does not


# ------------------------------------------------ red lines of the cells that fail on purpose

LESSON_04 = "04_fault_tolerance.ipynb"
RETRIES = "# 03. Automatic retries: a rank crashes mid-epoch"
SIGKILL = "# 12. A worker killed from outside, resumed at the exact batch"
EXERCISE = "# 11. Exercise 4: count steps across a restart"
ANNOUNCE = "## 03 · Automatic retries\n\n**Red output ahead, expected:** rank 1's planted crash."
EXPLAIN_03 = (
    "**The red lines above.** `Error in training function:` and a traceback ending in `InjectedFault`; gloo's "
    "`Connection closed by peer ... GLHF!`; Ray's `RAY_DEDUP_LOGS` notice."
)
# As Ray 2.60 prints them into a notebook: colour, log-forwarding prefix, a repeat mark with the dedup notice.
CRASH_03 = (
    "\x1b[36m(RayTrainWorker pid=16072)\x1b[0m Error in training function:\n"
    "\x1b[36m(RayTrainWorker pid=16072)\x1b[0m Traceback (most recent call last):\n"
    '\x1b[36m(RayTrainWorker pid=16072)\x1b[0m   File "/x/course_utils/lesson04/faults.py", line 127, in maybe_fail'
    " [repeated 2x across cluster] (Ray deduplicates logs by default. Set RAY_DEDUP_LOGS=0 to disable log "
    "deduplication, or see https://docs.ray.io/en/master/ray-observability/user-guides/configure-logging.html"
    "#log-deduplication for more options.)\n"
    '\x1b[36m(RayTrainWorker pid=16072)\x1b[0m     raise InjectedFault(f"injected failure")\n'
    "\x1b[36m(RayTrainWorker pid=16072)\x1b[0m course_utils.lesson04.faults.InjectedFault: injected failure on rank 1 at "
    "epoch 1, step 2\n"
    "\x1b[36m(RayTrainWorker pid=16072)\x1b[0m \n"
)
KILLED_07 = (
    "(TrainController pid=18276) Graceful shutdown of backend failed. This is expected if one of the workers "
    "has crashed.\n"
    "(TrainController pid=18276) ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing "
    "this task.\n"
    "(TrainController pid=18276) \tclass_name: RayTrainWorker\n"
    "(TrainController pid=18276) The actor is dead because its worker process has died. Worker exit type: "
    "SYSTEM_ERROR Worker exit detail: ... (1) the process was killed by the OOM killer due to high memory usage, "
    "... consider enabling resource isolation via --enable-resource-isolation ...\n"
)


def _code(source, stderr=""):
    import nbformat

    cell = nbformat.v4.new_code_cell(source)
    if stderr:
        cell.outputs = [nbformat.v4.new_output("stream", name="stderr", text=stderr)]
    return cell


def _md(text):
    import nbformat

    return nbformat.v4.new_markdown_cell(text)


def _nb(*cells):
    import nbformat

    return nbformat.v4.new_notebook(cells=list(cells))


def test_red_lines_announced_and_explained_pass():
    from maintainer_tools.harness.notebook_runs import unexplained_red_lines

    nb = _nb(_md(ANNOUNCE), _code(RETRIES + "\nfit()", CRASH_03), _md(EXPLAIN_03))
    assert unexplained_red_lines(nb, LESSON_04) == []


def test_a_red_line_of_no_known_kind_is_reported_even_in_a_failure_cell():
    from maintainer_tools.harness.notebook_runs import unexplained_red_lines

    for real_error in (
        "(RayTrainWorker pid=3) ValueError: Expected input batch_size (64) to match target batch_size (32).",
        "(RayTrainWorker pid=3) torch.OutOfMemoryError: CUDA out of memory.",
        "(TrainController pid=4) ray.exceptions.RayTaskError(FileNotFoundError): ray::f() (pid=5)",
        "(raylet) Spilled 2209 MiB, 103 objects",
    ):
        nb = _nb(_md(ANNOUNCE), _code(RETRIES + "\nfit()", CRASH_03 + real_error + "\n"), _md(EXPLAIN_03))
        found = unexplained_red_lines(nb, LESSON_04)
        assert len(found) == 1 and "a red line of no known kind" in found[0], found
        assert real_error.split(") ", 1)[1][:40] in found[0]


def test_a_kind_printed_but_not_explained_after_the_cell_is_reported():
    from maintainer_tools.harness.notebook_runs import unexplained_red_lines

    announce = "**Red output ahead, expected:** the killed worker."
    explained = "`Error in training function` ... `Graceful shutdown` ... `ActorDiedError` ... the traceback"
    nb = _nb(_md(announce), _code(SIGKILL + "\nfit()", KILLED_07), _md(explained))
    found = unexplained_red_lines(nb, LESSON_04)
    assert len(found) == 1 and "OOM killer" in found[0], found  # Ray's wrong guess, left uncorrected
    nb = _nb(
        _md(announce), _code(SIGKILL + "\nfit()", KILLED_07), _md(explained + "; not the OOM killer: we did")
    )
    assert unexplained_red_lines(nb, LESSON_04) == []
    # the explanation must be the cell right after: a code cell in between does not count
    nb = _nb(
        _md(announce), _code(SIGKILL + "\nfit()", KILLED_07), _code("x = 1"), _md(explained + " OOM killer")
    )
    assert len(unexplained_red_lines(nb, LESSON_04)) == 4  # every kind it printed: 4


def test_a_failure_cell_without_an_announcement_before_it_is_reported():
    from maintainer_tools.harness.notebook_runs import unexplained_red_lines

    nb = _nb(_md("## 03 · Automatic retries"), _code(RETRIES + "\nfit()", CRASH_03), _md(EXPLAIN_03))
    found = unexplained_red_lines(nb, LESSON_04)
    assert len(found) == 1 and "does not announce" in found[0], found
    # a cell that printed nothing red needs no announcement (unless every listed cell is checked)
    quiet = _nb(_md("## 03 · Automatic retries"), _code(RETRIES + "\nfit()"), _md(EXPLAIN_03))
    assert unexplained_red_lines(quiet, LESSON_04) == []
    assert any("does not announce" in f for f in unexplained_red_lines(quiet, LESSON_04, all_kinds=True))


def test_red_lines_of_cells_not_failing_on_purpose_are_left_to_alarming_output():
    from maintainer_tools.harness.notebook_runs import unexplained_red_lines

    nb = _nb(_md("## 02"), _code("# 02. What a checkpoint must hold\nx", CRASH_03))
    assert unexplained_red_lines(nb, LESSON_04) == []
    assert unexplained_red_lines(nb, "02_ray_train_migration.ipynb") == []


def test_an_answered_exercise_run_at_the_end_is_explained_by_the_shipped_cells_neighbours():
    from maintainer_tools.answered import ANSWERED_TAG
    from maintainer_tools.harness.notebook_runs import unexplained_red_lines

    crash = (
        "(RayTrainWorker pid=9) Error in training function:\n"
        "(RayTrainWorker pid=9) Traceback (most recent call last):\n"
        "(RayTrainWorker pid=9) course_utils.lesson04.faults.InjectedFault: the check crashed rank 1 at step 10 on purpose\n"
    )
    answered = _code(EXERCISE + "\ndef my_resumable_loop(config): ...", crash)
    answered.metadata["tags"] = [ANSWERED_TAG]
    before = _md("## 14 · Exercise 4\n\n**Red output ahead once answered, expected:** the check's crash.")
    after = _md("`Error in training function:` and a traceback ending in `InjectedFault`, the check's crash.")
    shipped = _code(EXERCISE + "\nmy_resumable_loop = ...  # YOUR ANSWER")
    nb = _nb(before, shipped, after, _md("**Next:**"), _md("## Exercises answered"), answered)
    assert unexplained_red_lines(nb, LESSON_04) == []
    nb = _nb(before, shipped, _md("Nothing here."), _md("**Next:**"), _md("## Exercises answered"), answered)
    assert len(unexplained_red_lines(nb, LESSON_04)) == 3  # header, frames, the check's InjectedFault


def test_rays_once_a_session_notice_may_be_explained_after_an_earlier_failure_cell():
    from maintainer_tools.harness.notebook_runs import unexplained_red_lines

    notice = (
        '(RayTrainWorker pid=2)   File "x.py", line 1, in f [repeated 2x across cluster] (Ray deduplicates logs '
        "by default. Set RAY_DEDUP_LOGS=0 to disable log deduplication, or see https://docs.ray.io for more "
        "options.)\n"
    )
    nb = _nb(
        _md(ANNOUNCE),
        _code(RETRIES + "\nfit()", CRASH_03),
        _md(EXPLAIN_03),
        _md("**Red output ahead, expected:** the killed worker."),
        _code(SIGKILL + "\nfit()", notice),
        _md("A traceback."),
    )
    assert unexplained_red_lines(nb, LESSON_04) == []
    nb.cells[2] = _md(EXPLAIN_03.replace("Ray's `RAY_DEDUP_LOGS` notice", "nothing else"))
    found = unexplained_red_lines(nb, LESSON_04)
    assert len(found) == 2 and all("RAY_DEDUP_LOGS" in f for f in found), found


def test_lesson_04_as_committed_announces_and_explains_every_listed_kind():
    import nbformat

    from maintainer_tools.harness.notebook_runs import (
        FAILURES_ON_PURPOSE,
        LESSONS,
        RED_LINES,
        unexplained_red_lines,
    )

    assert set(RED_LINES[LESSON_04]) == set(FAILURES_ON_PURPOSE[LESSON_04]), (
        "every failure cell has its red lines"
    )
    lesson = next(p for p in LESSONS if p.name == LESSON_04)
    nb = nbformat.read(str(lesson), as_version=4)
    firsts = [c.source.splitlines()[0] for c in nb.cells if c.cell_type == "code" and c.source]
    assert set(FAILURES_ON_PURPOSE[LESSON_04]) <= set(firsts), (
        "FAILURES_ON_PURPOSE names cells the lesson has"
    )
    assert unexplained_red_lines(nb, LESSON_04, all_kinds=True) == []


def _stderr_notebook(first_line: str, text: str):
    """A one-cell notebook whose code cell (starting ``first_line``) printed ``text`` on stderr."""
    import nbformat

    cell = nbformat.v4.new_code_cell(first_line)
    cell.outputs = [nbformat.v4.new_output("stream", name="stderr", text=text)]
    return nbformat.v4.new_notebook(cells=[cell])


def test_lesson_05s_pool_warning_is_announced_and_nothing_else_passes():
    from maintainer_tools.harness.notebook_runs import alarming_output

    line = (
        "[2026-11-26 07:24:53,396 E 9185 9185] core_worker.cc:2465: Actor with class name: "
        "'MapWorker(MapBatches(BatchPredictor))' and ID: 'ce64' has constructor arguments in the object store "
        "and max_restarts > 0. If the arguments in the object store go out of scope or are lost, the actor "
        "restart will fail.\n"
    )
    pool = "# 07. Batch inference with Ray Data"
    assert alarming_output(_stderr_notebook(pool, line), "05_inference.ipynb") == []
    assert alarming_output(_stderr_notebook(pool, line + "ValueError: a real error\n"), "05_inference.ipynb")


GCS_KILL_RACE = (
    "\x1b[36m(pid=gcs_server)\x1b[0m [2026-11-26 07:56:29,478 E 24401 24401] (gcs_server) "
    "gcs_actor_scheduler.cc:538: Failed to kill actor 26186032bfbbb2e96423cd140a000000, return status: "
    "Invalid: KillActor RPC failed for actor 26186032bfbbb2e96423cd140a000000: RpcError: RPC error: "
    "Socket closed rpc_code: 14\n"
)


def test_a_known_cluster_line_passes_only_on_the_shared_cluster_path():
    from maintainer_tools.harness.notebook_runs import alarming_output

    pool = "# 07. Batch inference with Ray Data"
    nb = _stderr_notebook(pool, GCS_KILL_RACE)
    assert alarming_output(nb, "05_inference.ipynb"), "on a learner's own Ray it is a finding"
    assert alarming_output(nb, "05_inference.ipynb", shared_cluster=True) == []
    other = GCS_KILL_RACE.replace("Socket closed", "Permission denied")
    assert alarming_output(_stderr_notebook(pool, other), "05_inference.ipynb", shared_cluster=True), (
        "another GCS error still counts"
    )


def test_abseils_lock_trace_in_a_notebook_is_a_finding_on_every_path():
    """start_ray drops it from the driver's output (rayinternals.skip_abseil_mutex_trace)."""
    from maintainer_tools.harness.notebook_runs import alarming_output

    line = "\x1b[36m(PlacementGroupCleaner pid=1)\x1b[0m [mutex.cc : 452] RAW: Unlock 0x55613d29fdd0\n"
    nb = _stderr_notebook("# 07. Batch inference with Ray Data", line)
    assert alarming_output(nb, "05_inference.ipynb", shared_cluster=True)
