"""Lesson 04's room: fault injection, extra Ray nodes for elastic runs, mid-epoch runs read back, and Ray
Train's record of a run as tables."""
