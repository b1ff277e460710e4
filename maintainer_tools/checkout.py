"""Where the checkout is, for the tools and the harness: they run from a repository, never from a wheel."""

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
