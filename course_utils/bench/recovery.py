"""Benchmark recovery (body moving here from course_utils.resumable)."""

from course_utils.resumable import bench_recovery as main

__all__ = ["main"]
