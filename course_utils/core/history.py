"""The full metric history of a Ray Train run, the Ray way.

``Result`` keeps only reports that carried a checkpoint, and only for the checkpoints it still
keeps (``num_to_keep``). ``ReportLog``, a Ray Train V2 ``UserCallback``, appends every report's
metrics to ``reports.json`` in the run's folder, so the history survives retries and a manual
restore. ``metric_history`` reads it, or the history every course checkpoint carries.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.fs as pafs
from ray.train import UserCallback

from course_utils.core.checkpoints import HISTORY_FILE, STATE_FILE, CheckpointError, load_state

REPORT_LOG = "reports.json"


def run_folder(
    storage_path: str, storage_filesystem: pafs.FileSystem | None, name: str
) -> tuple[pafs.FileSystem, str]:
    """(filesystem, path) of run ``name`` as ``RunConfig(storage_path, storage_filesystem)`` places it."""
    if storage_filesystem is None:
        fs, root = pafs.FileSystem.from_uri(
            storage_path if "://" in storage_path else str(Path(storage_path).absolute())
        )
    else:
        fs, root = storage_filesystem, storage_path
    return fs, f"{root.rstrip('/')}/{name}"


def read_reports(
    fs: pafs.FileSystem, folder: str, attempts: int = 5, pause_s: float = 0.2
) -> list[dict[str, Any]] | None:
    """The rows ``ReportLog`` wrote for the run in ``folder``; None when it wrote none.

    On S3 a reader of the old file can get a cut-off read of its replacement (pyarrow sizes the
    read before it fetches), so text that is not JSON is read again, up to ``attempts`` times.
    """
    path = f"{folder}/{REPORT_LOG}"
    for attempt in range(attempts):
        if fs.get_file_info(path).type != pafs.FileType.File:
            return None
        with fs.open_input_stream(path) as stream:
            text = stream.read().decode()
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            if attempt == attempts - 1:
                raise
            time.sleep(pause_s)
    return None  # attempts < 1


class ReportLog(UserCallback):
    """Keeps every report's metrics (rank 0's) in ``reports.json`` in the run folder.

    Runs on the Ray Train controller, not on the workers: ``after_report`` is called once all
    workers have reported. Each row gets ``checkpoint`` (the folder name, or None) and
    ``reported_at`` (a Unix time). The file is rewritten whole (S3 has no append).
    """

    def __init__(self) -> None:
        self._rows: list[dict[str, Any]] | None = None

    def after_report(self, run_context: Any, metrics: list[dict[str, Any]], checkpoint: Any) -> None:
        config = run_context.get_run_config()
        fs, folder = run_folder(config.storage_path, config.storage_filesystem, config.name)
        if self._rows is None:  # a restored run: continue the file its earlier trainers wrote
            self._rows = read_reports(fs, folder) or []
        row = {**metrics[0], "checkpoint": Path(checkpoint.path).name if checkpoint else None}
        self._rows.append({**row, "reported_at": time.time()})
        fs.create_dir(folder, recursive=True)
        partial = f"{folder}/{REPORT_LOG}.partial"
        with fs.open_output_stream(partial) as stream:
            stream.write(json.dumps(self._rows, indent=1, default=str).encode())
        fs.move(partial, f"{folder}/{REPORT_LOG}")  # readers never see half a file


def metric_history(source: Any) -> pd.DataFrame:
    """Every report as a DataFrame, from a ``Result`` (its ``ReportLog`` rows), or every epoch
    stored in a checkpoint (a ``Result`` without the log, a ``Checkpoint`` or a checkpoint dir)."""
    if hasattr(source, "path") and hasattr(source, "filesystem") and hasattr(source, "checkpoint"):
        rows = read_reports(source.filesystem, source.path)
        if rows is not None:
            return pd.DataFrame(rows).drop(columns=["checkpoint", "reported_at"])
    checkpoint = getattr(source, "checkpoint", source)
    if checkpoint is None:
        raise CheckpointError("This run reported no checkpoint, so there is no history to read.")
    if hasattr(checkpoint, "as_directory"):
        with checkpoint.as_directory() as directory:
            rows = _read(directory)
    else:
        rows = _read(checkpoint)
    return pd.DataFrame(rows)


def _read(directory: Any) -> list[dict]:
    """The history a checkpoint carries: ``history.json`` where the course's helpers wrote one, else the
    ``"history"`` of its ``state.pt`` (the lessons' loops save it there, as a learner's own loop would)."""
    path = Path(directory) / HISTORY_FILE
    if path.is_file():
        return json.loads(path.read_text())
    state = load_state(directory) if (Path(directory) / STATE_FILE).is_file() else {}
    if "history" not in state:
        raise CheckpointError(f"No {HISTORY_FILE}, nor a history in {STATE_FILE}, in checkpoint {directory}.")
    return list(state["history"])


def report_times(result: Any) -> pd.DataFrame:
    """(epoch, reported_at) of every report of a run, from the ``reports.json`` its
    ``ReportLog`` callback wrote: where the utilization plot marks the epochs."""
    rows = read_reports(result.filesystem, result.path) or []
    frame = pd.DataFrame(rows)
    if frame.empty or "reported_at" not in frame:
        return pd.DataFrame(columns=["epoch", "reported_at"])
    return frame[["epoch", "reported_at"]]
