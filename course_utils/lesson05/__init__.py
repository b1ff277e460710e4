"""Lesson 05's room: what the model actor and the pool stand on, and the side-by-side timing."""
