"""The one device resolver: what ``auto | cpu | cuda | cuda:N`` means on a machine (CUDA
availability and GPU count injected), and which values are refused, naming the key."""

from __future__ import annotations

import pytest
import torch
from codemoe.core.devices import check_device, resolve_device
from codemoe.core.errors import ConfigError

# (spec, local rank, CUDA available, GPUs) -> device
RESOLVED = [
    ("auto", 0, False, 0, "cpu"),
    ("auto", 1, False, 0, "cpu"),  # torchrun on a CPU machine: every rank on the CPU
    ("auto", 0, True, 2, "cuda:0"),
    ("auto", 1, True, 2, "cuda:1"),  # torchrun: the local rank's GPU
    ("cpu", 1, True, 2, "cpu"),  # the CPU on a GPU machine, when asked for
    ("cuda", 0, True, 1, "cuda:0"),
    ("cuda", 1, True, 2, "cuda:1"),
    ("cuda:1", 0, True, 2, "cuda:1"),  # an explicit GPU wins over the local rank
]


@pytest.mark.parametrize(("spec", "rank", "available", "count", "expected"), RESOLVED)
def test_a_spec_resolves_to_the_device_of_the_machine(spec, rank, available, count, expected):
    device = resolve_device(spec, local_rank=rank, cuda_available=available, device_count=count)
    assert device == torch.device(expected)


# (spec, local rank, CUDA available, GPUs) -> what the error says besides the key
REFUSED = [
    ("cuda", 0, False, 0, "needs CUDA"),
    ("cuda:0", 0, False, 0, "needs CUDA"),
    ("cuda:3", 0, True, 2, "GPU 3, but this machine has 2 GPU(s)"),
    ("auto", 2, True, 2, "LOCAL_RANK=2"),  # three ranks on two GPUs
    ("cdua", 0, True, 2, "did you mean 'cuda'"),
    ("gpu", 0, True, 2, "not a device"),
    ("cuda:-1", 0, True, 2, "not a device"),
]


@pytest.mark.parametrize(("spec", "rank", "available", "count", "says"), REFUSED)
def test_a_device_that_is_not_there_is_refused_naming_the_key(spec, rank, available, count, says):
    with pytest.raises(ConfigError) as info:
        resolve_device(spec, key="stages.rl.device", local_rank=rank, cuda_available=available, device_count=count)
    assert str(info.value).startswith("'stages.rl.device': ")
    assert says in str(info.value)


def test_local_rank_comes_from_torchrun(monkeypatch):
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert resolve_device("auto", cuda_available=True, device_count=2) == torch.device("cuda", 1)
    assert resolve_device("cuda", cuda_available=True, device_count=2) == torch.device("cuda", 1)


def test_the_syntax_check_lists_the_choices():
    check_device("cuda:12")
    with pytest.raises(ConfigError, match=r"'device': 3 is not a device; use one of auto, cpu, cuda, cuda:N"):
        check_device(3)


def test_usable_cpus_follow_the_affinity_mask_not_the_machine(monkeypatch):
    import os

    from codemoe.core.devices import usable_cpus

    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {2, 5}, raising=False)
    assert usable_cpus() == 2  # taskset -c 2,5 or a container's cpuset
    monkeypatch.delattr(os, "sched_getaffinity")  # macOS has no affinity mask
    assert usable_cpus() == 64
    monkeypatch.setattr(os, "cpu_count", lambda: None)
    assert usable_cpus() == 1
