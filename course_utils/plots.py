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
