"""Remove the course's offline MNIST copy once nobody needs it: what ``./build.sh clean --data`` runs.

No lesson calls it: the copy under ``COURSE_DATA`` is shared by every learner who points there, so
lesson 06 keeps it and says how to remove it (``course_utils.lesson06.cleanup.data_copy_note``). Deleting goes
through ``course_utils.lesson06.cleanup.remove_path``, so only the course's own copy can go.
"""

from __future__ import annotations

from course_utils.core.storage import resolve as resolve_storage
from course_utils.lesson06.cleanup import CleanupReport, Removed, offline_data_copy, remove_path


def remove_data_copy(dry_run: bool = False) -> list[Removed]:
    """Delete the course's offline MNIST copy, for when nobody needs it any more (``./build.sh clean
    --data``; no lesson calls it). Holds ``ensure_mnist``'s lock, so a learner preparing it meanwhile
    waits and then rewrites it in seconds."""
    from filelock import FileLock

    copy = offline_data_copy()
    if copy is None:
        return []
    with FileLock(str(copy.parent / ".mnist.lock")):
        return [remove_path(copy, resolve_storage(), dry_run)]


def clean_data_cli(argv: list[str] | None = None) -> int:
    """``python -m maintainer_tools.clean_data --data [--dry-run]``: what ``./build.sh clean --data`` runs."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m maintainer_tools.clean_data", description=clean_data_cli.__doc__
    )
    parser.add_argument("--data", action="store_true", help="remove the course's offline MNIST copy")
    parser.add_argument("--dry-run", action="store_true", help="say what would go, delete nothing")
    args = parser.parse_args(argv)
    if not args.data:
        parser.error("nothing to do: --data removes the shared MNIST copy (lesson 06 removes the rest)")
    removed = remove_data_copy(dry_run=args.dry_run)
    print(
        CleanupReport(removed=removed, dry_run=args.dry_run).describe()
        if removed
        else "no course MNIST copy here"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(clean_data_cli())
