"""Helpers for the Ray Train course: plumbing the notebooks import so they can show only what
each lesson teaches. Importing this package does no work: no Ray start, no downloads."""

__all__ = [
    "checkpoints",
    "cleanup",
    "config",
    "data",
    "device",
    "faults",
    "history",
    "inference",
    "model",
    "plots",
    "raydata",
    "resumable",
    "session",
    "training",
]
