"""The core every lesson shares: configuration and device, starting Ray, storage, MNIST, the model and its
checkpoints, a run's history, and what the lessons display (plots, progress bars, ``show_source``, comparisons)."""
