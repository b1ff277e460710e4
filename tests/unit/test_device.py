import torch

from course_utils import device


def test_device_matches_visible_gpus(monkeypatch):
    monkeypatch.setattr(device, "gpu_count", lambda: 0)
    assert device.get_device() == torch.device("cpu") and not device.has_gpu()
