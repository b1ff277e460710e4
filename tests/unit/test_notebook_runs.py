"""The check every lesson item applies to its executed output (conftest.LessonItem)."""


def test_alarming_output_flags_tracebacks_and_report_dumps_unless_on_purpose():
    import nbformat

    from tests.notebook_runs import FAILURES_ON_PURPOSE, alarming_output

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
    # Announced before its cell: lesson 03's split demo warning in the fit's output, and nothing else there.
    split = "(SplitCoordinator pid=3) StreamSplitDataIterator(epoch=-1, split=0) blocked waiting on other clients\n"
    fit = "# 11. TorchTrainer with datasets="
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
