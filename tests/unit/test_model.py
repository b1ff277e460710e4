import torch
from torch import nn

from course_utils.core.model import build_resnet18, predict, unwrap


def test_resnet18_takes_one_channel_digits():
    model = build_resnet18()
    assert model.conv1.in_channels == 1
    assert model(torch.zeros(2, 1, 28, 28)).shape == (2, 10)


def test_unwrap_without_ddp_is_identity():
    model = build_resnet18()
    assert unwrap(model) is model


def test_unwrap_ddp_returns_module(monkeypatch):
    inner = nn.Linear(2, 2)

    class FakeDDP(nn.parallel.DistributedDataParallel):
        def __init__(self, module):  # no process group needed to test unwrapping
            nn.Module.__init__(self)
            self.module = module

    assert unwrap(FakeDDP(inner)) is inner


def test_predict_returns_classes_on_cpu():
    preds = predict(build_resnet18(), torch.zeros(3, 1, 28, 28))
    assert preds.shape == (3,) and preds.dtype == torch.int64 and preds.device.type == "cpu"
