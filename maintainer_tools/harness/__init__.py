"""The test harness: what executing a lesson on a tier needs (the lessons and their tiers, the red lines a run
may print, three hosts in network namespaces, a Colab-shaped venv, the workshop's cluster and S3, Chromium).
The tests in ``tests/`` use it; ``tests/unit`` tests it."""
