"""The full metric history of a Ray Train run.

Ray Train V2 keeps only reports that carried a checkpoint, and only for the checkpoints it
still keeps (``num_to_keep``). The course loop therefore stores every epoch's metrics inside
each checkpoint (``history.json``); the latest checkpoint holds the whole history.
"""

from __future__ import annotations

import json
from typing import Any

import pandas as pd

from course_utils.checkpoints import HISTORY_FILE, CheckpointError


def metric_history(source: Any) -> pd.DataFrame:
    """Every reported epoch as a DataFrame, from a Result, a Checkpoint or a checkpoint dir."""
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
    from pathlib import Path

    path = Path(directory) / HISTORY_FILE
    if not path.is_file():
        raise CheckpointError(f"No {HISTORY_FILE} in checkpoint {directory}.")
    return json.loads(path.read_text())
