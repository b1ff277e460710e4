"""What the tests ask of the course's ownership records (``course_utils.core.storage.OWNER_FILE``).

No lesson needs it, so it is not in ``course_utils``.
"""

from __future__ import annotations

import pyarrow.fs as pafs

from course_utils.core.config import learner
from course_utils.core.storage import read_owner


def is_mine(fs: pafs.FileSystem, path: str) -> bool:
    """True when folder ``path`` carries the course's record naming this learner."""
    record = read_owner(fs, path)
    return record is not None and record["learner"] == learner()
