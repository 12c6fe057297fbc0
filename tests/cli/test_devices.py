"""``--device``: any device string torch parses, checked against what this machine has
(availability monkeypatched: no accelerator is needed), one line where it does not exist."""

from __future__ import annotations

import argparse

import pytest
import torch

from posenc.cli.devices import add_device_arguments, resolve_device
from posenc.errors import UserError


@pytest.fixture
def machine(monkeypatch):
    """Pretend this machine has ``cuda`` CUDA GPUs, an MPS device or not, ``xpu`` XPUs."""
    def have(cuda: int = 0, mps: bool = False, xpu: int = 0) -> None:
        monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda > 0)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: cuda)
        monkeypatch.setattr(torch.backends.mps, "is_available", lambda: mps)
        monkeypatch.setattr(torch.xpu, "is_available", lambda: xpu > 0)
        monkeypatch.setattr(torch.xpu, "device_count", lambda: xpu)
    return have


def test_the_option_takes_device_strings_argparse_used_to_refuse():
    p = argparse.ArgumentParser()
    add_device_arguments(p)
    for name in ("cuda:1", "mps", "xpu", "xpu:0", "cpu", "auto"):
        assert p.parse_args(["--device", name]).device == name
    assert p.parse_args([]).device == "auto"


@pytest.mark.parametrize("have,name", [
    ({}, "cpu"), ({}, "cpu:0"),
    ({"cuda": 2}, "cuda"), ({"cuda": 2}, "cuda:1"),
    ({"mps": True}, "mps"),
    ({"xpu": 1}, "xpu"), ({"xpu": 1}, "xpu:0"),
])
def test_a_device_this_machine_has_is_returned_as_given(machine, have, name):
    machine(**have)
    assert resolve_device(name) == name


@pytest.mark.parametrize("have,expected", [({}, "cpu"), ({"cuda": 1}, "cuda"),
                                           ({"mps": True}, "cpu")])
def test_auto_is_the_cuda_gpu_when_there_is_one(machine, have, expected):
    machine(**have)
    assert resolve_device("auto") == expected


@pytest.mark.parametrize("have,name,message", [
    ({}, "cuda", "--device 'cuda' was asked for but torch sees no GPU of type 'cuda'"),
    ({"cuda": 2}, "cuda:2", "torch sees 2 GPU(s) of type 'cuda', numbered 0..1"),
    ({"cuda": 1}, "mps", "--device 'mps' was asked for but torch sees no GPU of type 'mps'"),
    ({}, "xpu:0", "torch sees no GPU of type 'xpu'"),
    ({"xpu": 1}, "xpu:3", "torch sees 1 GPU(s) of type 'xpu', numbered 0..0"),
    ({}, "gpu", "--device 'gpu' is not a device: use auto, cpu, cuda, cuda:N, mps or xpu"),
    ({}, "cuda:x", "--device 'cuda:x' is not a device"),
    ({}, "", "--device '' is not a device"),
    ({}, "meta", "models cannot run on the meta device"),
])
def test_a_device_that_does_not_exist_here_is_one_line(machine, have, name, message):
    machine(**have)
    with pytest.raises(UserError) as err:
        resolve_device(name)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_command_refuses_a_missing_gpu_in_one_line(machine, capsys):
    """Through a command: the option parses, then the device is checked (exit 2)."""
    from posenc.cli import main
    machine(cuda=1)
    code = main(["demo-generate", "--device", "cuda:1", "--tokens", "1"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert "--device 'cuda:1' was asked for but torch sees 1 GPU(s) of type 'cuda'" in err
