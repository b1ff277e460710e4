import torch

from course_utils.core import device


def test_device_matches_visible_gpus(monkeypatch):
    monkeypatch.setattr(device, "gpu_count", lambda: 0)
    assert device.get_device() == torch.device("cpu") and not device.has_gpu()


def test_loader_options_add_workers_and_pinned_memory_only_where_a_gpu_trains(monkeypatch):
    from course_utils.core import device

    monkeypatch.setattr(device, "gpu_count", lambda: 0)
    assert device.loader_options(cpus=16) == {}, "on the CPU the loader stays in the training process"
    monkeypatch.setattr(device, "gpu_count", lambda: 1)
    gpu = device.loader_options(cpus=16)
    assert gpu["num_workers"] == 8 and gpu["pin_memory"] and gpu["persistent_workers"]
    assert device.loader_options(cpus=2)["num_workers"] == 1
