"""Pictures a learner would rather look at than read. Each returns the matplotlib Figure."""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from course_utils.core.data import denormalise


def _image(x: torch.Tensor):
    x = torch.as_tensor(x)
    if x.dtype.is_floating_point:
        x = denormalise(x)
    return x.squeeze().cpu().numpy()


def sample_grid(dataset, n: int = 16, cols: int = 8, title: str = "MNIST samples") -> Figure:
    """The first ``n`` digits of a (image, label) dataset with their labels."""
    rows = (n + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(cols * 1.1, rows * 1.3))
    for i, ax in enumerate(axes.flat):
        ax.axis("off")
        if i < n:
            image, label = dataset[i]
            ax.imshow(_image(image), cmap="gray")
            ax.set_title(str(int(label)), fontsize=10)
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def loss_curves(
    history: pd.DataFrame,
    title: str = "Training history",
    x: str = "epoch",
    losses: Sequence[str] = ("train_loss", "test_loss"),
    accuracy: str | None = "accuracy",
) -> Figure:
    """Loss per epoch (left) and accuracy (right) from a metrics DataFrame."""
    has_acc = accuracy is not None and accuracy in history
    fig, axes = plt.subplots(1, 2 if has_acc else 1, figsize=(10 if has_acc else 5, 3.5), squeeze=False)
    ax = axes[0][0]
    for column in losses:
        if column in history:
            ax.plot(history[x], history[column], marker="o", label=column)
    ax.set_xlabel(x)
    ax.set_ylabel("loss")
    ax.legend()
    ax.grid(alpha=0.3)
    if has_acc:
        axes[0][1].plot(history[x], history[accuracy], marker="o", color="tab:green")
        axes[0][1].set_xlabel(x)
        axes[0][1].set_ylabel("test accuracy")
        axes[0][1].grid(alpha=0.3)
    for axis in fig.axes:
        axis.xaxis.set_major_locator(MaxNLocator(integer=True))  # epochs 0, 1, 2: no 0.5
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def prediction_grid(
    images: torch.Tensor,
    labels: Sequence[int],
    predictions: Sequence[int],
    cols: int = 8,
    title: str = "Predictions (green right, red wrong)",
) -> Figure:
    """Digits with predicted vs true labels, wrong ones in red."""
    n = len(images)
    rows = (n + cols - 1) // cols
    # Two-line titles need the height: at 1.4 in a row they ran into the digits of the row above.
    fig, axes = plt.subplots(rows, cols, figsize=(cols * 1.1, rows * 1.8), squeeze=False)
    for i, ax in enumerate(axes.flat):
        ax.axis("off")
        if i < n:
            ax.imshow(_image(images[i]), cmap="gray")
            ok = int(predictions[i]) == int(labels[i])
            ax.set_title(
                f"pred {int(predictions[i])}\ntrue {int(labels[i])}",
                fontsize=8,
                color="green" if ok else "red",
            )
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def bars(values: dict[str, float], ylabel: str, title: str) -> Figure:
    """A labelled bar per measurement (throughput comparisons)."""
    fig, ax = plt.subplots(figsize=(1.8 + 1.6 * len(values), 3.5))
    names, heights = list(values), list(values.values())
    rects = ax.bar(names, heights, color=plt.cm.tab10.colors[: len(values)])
    ax.bar_label(rects, labels=[f"{v:,.0f}" for v in heights])
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    fig.tight_layout()
    return fig


def confusion_matrix(
    matrix, title: str = "Confusion matrix", class_names: Sequence[str] | None = None
) -> Figure:
    """A [true, predicted] count matrix as a heat map with the counts written in, and per-class recall."""
    matrix = np.asarray(matrix)
    n = matrix.shape[0]
    names = list(class_names) if class_names is not None else [str(i) for i in range(n)]
    fig, ax = plt.subplots(figsize=(6.2, 5.4))
    image = ax.imshow(matrix, cmap="Blues")
    fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04, label="digits")
    threshold = matrix.max() / 2 if matrix.size and matrix.max() else 0
    for i in range(n):
        for j in range(n):
            if matrix[i, j]:
                color = "white" if matrix[i, j] > threshold else ("black" if i == j else "tab:red")
                ax.text(j, i, int(matrix[i, j]), ha="center", va="center", fontsize=8, color=color)
    recall = matrix.diagonal() / np.maximum(matrix.sum(axis=1), 1)
    ax.set_xticks(range(n), names)
    ax.set_yticks(range(n), [f"{name} ({r:.0%})" for name, r in zip(names, recall, strict=True)])
    ax.set_xlabel("predicted")
    ax.set_ylabel("true (recall)")
    total = matrix.sum()
    ax.set_title(f"{title}\naccuracy {matrix.trace() / max(total, 1):.1%} on {total:,} digits")
    fig.tight_layout()
    return fig


def attempt_timeline(
    rows: pd.DataFrame,
    x: str,
    attempt: str,
    starts: dict | None = None,
    failures: Sequence[tuple] = (),
    xlabel: str | None = None,
    title: str = "Which attempt did which work",
) -> Figure:
    """One lane per attempt: where it started, the checkpoints it saved, and where it failed (the
    work lost after its last checkpoint in red). ``rows``: one per checkpoint (``x``: its position,
    ``attempt``: who saved it); ``starts``: attempt -> start; ``failures``: (attempt, position, label)."""
    failed = {a: (pos, label) for a, pos, label in failures}
    attempts = sorted(set(rows[attempt]) | set(starts or {}) | set(failed))
    fig, ax = plt.subplots(figsize=(9, 0.9 + 0.75 * len(attempts)))
    note = {"textcoords": "offset points", "fontsize": 8}  # a label beside its point
    for lane, name in enumerate(attempts):
        mine = rows[rows[attempt] == name]
        start = (starts or {}).get(name, mine[x].min() if len(mine) else 0)
        saved_to = mine[x].max() if len(mine) else start
        color = plt.cm.tab10.colors[lane % 10]
        ax.plot([start, saved_to], [lane, lane], color=color, linewidth=7, alpha=0.4, solid_capstyle="butt")
        ax.scatter(
            mine[x], [lane] * len(mine), color=color, zorder=3, label="checkpoint" if lane == 0 else None
        )
        ax.annotate(f"starts at {start:g}", (start, lane), xytext=(0, 10), **note)
        if name in failed:
            position, label = failed[name]
            ax.plot([saved_to, position], [lane, lane], color="tab:red", linewidth=7, alpha=0.25)
            ax.scatter([position], [lane], marker="X", s=90, color="tab:red", zorder=4)
            ax.annotate(label, (position, lane), xytext=(8, -3), color="tab:red", **note)
    ax.set_yticks(range(len(attempts)), [f"attempt {a}" for a in attempts])
    ax.set_ylim(-0.7, len(attempts) - 0.3)
    ax.invert_yaxis()
    ax.set_xlabel(xlabel or x)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # epochs or batches completed: counts
    ax.margins(x=0.12)
    ax.grid(axis="x", alpha=0.3)
    ax.legend(loc="upper right", fontsize=8)
    ax.set_title(title)
    fig.tight_layout()
    return fig


def epoch_attempts(
    history: pd.DataFrame, failures: Sequence[tuple] = (), title: str = "Which attempt trained which epochs"
) -> Figure:
    """``attempt_timeline`` of a run checkpointed every epoch whose reports carry ``start_epoch`` (lesson 04's
    retries): one attempt per epoch it started at, each checkpoint at the epochs completed;
    ``failures``: (attempt, epochs completed when it failed, label)."""
    attempt_of = {start: n + 1 for n, start in enumerate(sorted(history["start_epoch"].unique()))}
    rows = history.assign(done=history["epoch"] + 1, attempt=history["start_epoch"].map(attempt_of))
    starts = {attempt: start for start, attempt in attempt_of.items()}
    return attempt_timeline(
        rows,
        x="done",
        attempt="attempt",
        starts=starts,
        failures=failures,
        xlabel="epochs completed",
        title=title,
    )


def ray_data_ingest_diagram(num_workers: int = 2, accelerator: str = "GPU") -> Figure:
    """Where each part of a Ray Data + Ray Train run works, and what the object store carries."""
    from matplotlib.patches import FancyBboxPatch

    fig, ax = plt.subplots(figsize=(11, 4.6))
    ax.set_xlim(0, 11)
    ax.set_ylim(0, 5.4)
    ax.axis("off")

    def box(x, y, w, h, text, color):
        ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0.05", fc=color, ec="0.3"))
        ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=9)

    def arrow(x0, y0, x1, y1, text=""):
        ax.annotate("", (x1, y1), (x0, y0), arrowprops={"arrowstyle": "->", "lw": 1.5, "color": "0.25"})
        if text:
            ax.text((x0 + x1) / 2, (y0 + y1) / 2 + 0.15, text, ha="center", fontsize=8, color="0.25")

    box(0.1, 2.0, 1.9, 1.4, "Parquet files\nshared storage\nimage: 784 B\nlabel: int64", "#e8e8e8")
    ax.text(3.6, 5.05, "CPU slots (any node, CPU-only nodes too)", ha="center", fontsize=9, weight="bold")
    for i, y in enumerate((3.55, 2.05, 0.55)):
        box(2.5, y, 2.2, 1.1, f"Ray Data task {i + 1}\nread_parquet ->\nmap_batches(normalise)", "#cfe2f3")
        arrow(2.0, 2.7, 2.5, y + 0.55)
    store = "object store\n(shared memory\nper node)\n\nfloat32 blocks\n[B, 1, 28, 28]\n3,136 B / digit"
    box(5.3, 1.3, 1.8, 2.8, store, "#fff2cc")
    for y in (4.1, 2.6, 1.1):
        arrow(4.7, y, 5.3, 2.7)
    ax.text(9.2, 5.05, f"training workers ({accelerator})", ha="center", fontsize=9, weight="bold")
    step = 4.2 / max(num_workers, 1)
    for rank in range(num_workers):
        y = 4.6 - (rank + 1) * step + 0.15
        worker = f"rank {rank}: get_dataset_shard\niter_torch_batches(device)\nforward / backward"
        box(7.9, y, 2.6, step - 0.3, worker, "#d9ead3")
        arrow(7.1, 2.7, 7.9, y + (step - 0.3) / 2)
        if rank:
            ax.text(9.2, y + step - 0.22, "DDP all-reduce (gradients)", ha="center", fontsize=8, color="0.25")
    ax.text(7.5, 4.0, "streaming\nsplit", ha="center", fontsize=8, color="0.25")
    ax.text(
        5.5,
        0.05,
        "Decoding and normalising run on CPUs while the accelerators train; batches stream (backpressure keeps the store small).",
        ha="center",
        fontsize=8.5,
        style="italic",
    )
    fig.tight_layout()
    return fig


UTILIZATION_PANELS = (  # (the metrics' prefix in course_utils.internals.metrics' names, the y label)
    ("cpu %", "CPU %"),
    ("memory used GB", "memory used (GB)"),
    ("object store used MB", "object store (MB)"),
    ("gpu", "GPU % / GPU memory (MB)"),
)


def utilization(
    samples: pd.DataFrame,
    epochs: pd.DataFrame | None = None,
    title: str = "Utilization during the fit",
) -> Figure:
    """Time series of a run's node metrics (``metrics.sample_metrics``'s frame), the epochs marked.

    One panel per kind (CPU, memory, object store, GPU, ``ray_train_*``), one line per node (or GPU,
    or rank); ``epochs`` (``history.report_times``) draws a dashed line at each epoch's report. The
    lines are steps: Ray refreshes its figures every 5-10 s.
    """
    t0 = samples["time"].min() if len(samples) else 0.0
    metric = samples["metric"].astype(str)
    is_train = metric.str.startswith("ray_train_")
    is_state = metric.str.startswith("ray_train_controller_state")
    panels = []
    for prefix, label in UTILIZATION_PANELS:
        if prefix == "gpu":
            rows = samples[metric.str.match(r"gpu( \d+)? ")]
        else:
            rows = samples[metric == prefix]
        if len(rows):
            panels.append((label, rows))
    train = samples[is_train & ~is_state]
    if len(train):
        panels.append(("Ray Train (s)", train))
    fig, axes = plt.subplots(
        max(len(panels), 1), 1, figsize=(9, 1.9 * max(len(panels), 1) + 0.6), sharex=True, squeeze=False
    )
    axes = axes[:, 0]
    multi_node = samples["node"].nunique() > 1
    for ax, (label, rows) in zip(axes, panels, strict=False):
        for (node, name), series in rows.groupby(["node", "metric"], sort=True):
            series = series.sort_values("time")
            legend = name.removeprefix("ray_train_") if label.startswith(("GPU", "Ray Train")) else node
            if multi_node and label.startswith(("GPU", "Ray Train")):
                legend = f"{node}: {name}"
            ax.plot(series["time"] - t0, series["value"], drawstyle="steps-post", label=legend)
        ax.set_ylabel(label, fontsize=9)
        if label == "CPU %":
            ax.set_ylim(0, 105)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="upper left")
    if not panels:
        axes[0].text(0.5, 0.5, "no samples", ha="center", va="center", transform=axes[0].transAxes)
    note = {"textcoords": "offset points", "fontsize": 7, "color": "0.3"}  # small grey labels
    states = samples[is_state & (samples["value"] == 1)].sort_values("time")
    if len(states) and panels:  # the controller's state as text where it changes
        last = None
        for _, row in states.iterrows():
            state = row["metric"].split("[", 1)[-1].rstrip("]")
            if state != last:
                axes[-1].annotate(state, (row["time"] - t0, 0), xytext=(2, 2), **note)
                last = state
    if epochs is not None and len(epochs):
        for _, row in epochs.iterrows():
            for ax in axes:
                ax.axvline(row["reported_at"] - t0, color="0.4", linestyle="--", linewidth=0.8)
            axes[0].annotate(
                f"epoch {int(row['epoch'])}",
                (row["reported_at"] - t0, 1),
                xycoords=("data", "axes fraction"),
                xytext=(-2, -10),
                ha="right",
                **note,
            )
    axes[-1].set_xlabel("seconds since sampling started (dashed: an epoch's report)")
    fig.suptitle(title)
    fig.tight_layout()
    return fig
