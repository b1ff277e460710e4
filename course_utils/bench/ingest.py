"""Benchmark ingest (body moving here from course_utils.raydata)."""

from course_utils.raydata import bench_ingest as main

__all__ = ["main"]
