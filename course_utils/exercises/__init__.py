"""The exercises at the end of each lesson: ``checks`` (not attempted / wrong because / correct,
``hint`` and ``solution``), ``harness`` (runs a learner's training function for real) and one module
of checks per lesson (``lesson01`` ... ``lesson06``). Importing this package does no work."""
