"""Lesson 03's room: Ray Data (digits as Parquet, the transforms, ingest timing)."""
