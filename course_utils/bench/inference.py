"""Benchmark inference (body moving here from course_utils.inference)."""

from course_utils.inference import bench_inference as main

__all__ = ["main"]
