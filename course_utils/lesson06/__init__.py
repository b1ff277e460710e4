"""Lesson 06's room: removing what the course made for this learner, and only that."""
