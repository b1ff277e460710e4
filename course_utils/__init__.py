"""Helpers for the Ray Train course: plumbing the notebooks import so they can show only what
each lesson teaches. ``core`` is what every lesson shares; ``lesson03`` ... ``lesson06`` each hold
what one lesson alone uses; ``internals`` reads Ray from the side; ``exercises`` checks answers;
``lesson_code`` and ``lesson_inference`` are generated from the lessons' ``#@save`` cells
(README.md in this folder draws it). Importing this package does no work: no Ray start, no downloads."""

__all__ = [
    "core",
    "exercises",
    "internals",
    "lesson03",
    "lesson04",
    "lesson05",
    "lesson06",
    "lesson_code",
    "lesson_inference",
]
