"""The private room: what reads Ray from the side (its non-public names in ``rayinternals``, the dashboard and
state API, Ray's own log lines, Prometheus metrics, a hung run's stacks). Lessons call it; they never teach it."""
