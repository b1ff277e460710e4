"""The course model: torchvision's ResNet-18 with a 1-channel stem for MNIST."""

from __future__ import annotations

import torch
from torch import nn
from torchvision.models import resnet18


def build_resnet18(num_classes: int = 10) -> nn.Module:
    """ResNet-18, randomly initialised, taking 1-channel 28x28 digits."""
    model = resnet18(weights=None, num_classes=num_classes)
    model.conv1 = nn.Conv2d(1, 64, kernel_size=7, stride=2, padding=3, bias=False)
    return model


def unwrap(model: nn.Module) -> nn.Module:
    """The plain model inside a DDP wrapper, or the model itself.

    ``ray.train.torch.prepare_model`` wraps in DDP only when there is more than one worker,
    so ``model.module`` exists on 2 workers and not on 1: always go through this.
    """
    return model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model


@torch.no_grad()
def predict(model: nn.Module, images: torch.Tensor, device: torch.device | None = None) -> torch.Tensor:
    """Predicted class per image for a batch of normalised [B, 1, 28, 28] images."""
    model.eval()
    device = device or next(model.parameters()).device
    return model(images.to(device)).argmax(dim=1).cpu()
