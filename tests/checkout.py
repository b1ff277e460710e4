"""Where the checkout is, for the tests and their harness: found from this file, not read from the learner's
configuration (``course_utils.core.config``), which the tests set and change."""

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
