"""Exercises of lesson 06: a path check that keeps deletion inside the course's folder."""

from __future__ import annotations

from typing import Any

from course_utils.exercises.checks import correct, not_attempted, wrong


def check_inside(inside: Any, exercise: str = "06.1") -> None:
    """``inside(path, root)``: True only for paths strictly under ``root``, after resolving ``..``."""
    if not_attempted(exercise, inside):
        return None
    if not callable(inside):
        raise wrong(exercise, "the answer should be a function inside(path, root) -> bool.")
    root = "/srv/course/storage"
    cases = [
        (f"{root}/lesson02", True, "a run folder inside the root"),
        (f"{root}/a/b/c", True, "a nested folder"),
        (root, False, "the root itself (deleting it would remove other people's runs too)"),
        (f"{root}/../data", False, "a path that climbs out with '..'"),
        (f"{root}-old/run", False, "a sibling folder whose name merely starts with the root's"),
        ("/etc", False, "a folder elsewhere"),
    ]
    for path, expected, what in cases:
        got = inside(path, root)
        if bool(got) != expected:
            raise wrong(
                exercise,
                f"inside({path!r}, {root!r}) returned {got!r} for {what}; expected {expected}. "
                "Compare whole path components after normalising (os.path.normpath / Path.is_relative_to).",
            )
    return correct(exercise, "only paths strictly inside the root pass, however they are written.")
