"""Pictures a learner would rather look at than read. Each returns the matplotlib Figure."""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import pandas as pd
import torch
from matplotlib.figure import Figure

from course_utils.data import denormalise


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
    fig, axes = plt.subplots(rows, cols, figsize=(cols * 1.1, rows * 1.4), squeeze=False)
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
    import numpy as np

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
                ax.text(
                    j,
                    i,
                    int(matrix[i, j]),
                    ha="center",
                    va="center",
                    fontsize=8,
                    color="white" if matrix[i, j] > threshold else ("black" if i == j else "tab:red"),
                )
    recall = matrix.diagonal() / np.maximum(matrix.sum(axis=1), 1)
    ax.set_xticks(range(n), names)
    ax.set_yticks(range(n), [f"{name} ({r:.0%})" for name, r in zip(names, recall, strict=True)])
    ax.set_xlabel("predicted")
    ax.set_ylabel("true (recall)")
    total = matrix.sum()
    ax.set_title(f"{title}\naccuracy {matrix.trace() / max(total, 1):.1%} on {total:,} digits")
    fig.tight_layout()
    return fig
