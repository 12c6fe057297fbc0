"""``--device`` / ``--dtype``: the same two options on every command that runs a model.

``--device`` takes any device string torch parses (``cpu``, ``cuda``, ``cuda:1``, ``mps``,
``xpu``, ...) or ``auto`` (the CUDA GPU when there is one, else the CPU). A device that does
not exist on this machine is refused with one line (:class:`~posenc.errors.UserError`) before
any work, instead of failing later inside torch.
"""

from __future__ import annotations

import argparse

from ..errors import UserError

DTYPES = ("float32", "bfloat16")
#: device types that hold no data or that posenc's models do not run on
REFUSED_TYPES = ("meta",)


def add_device_arguments(p: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    p.add_argument("--device", default="auto", metavar="DEVICE",
                   help="where the model runs: auto (the CUDA GPU when there is one, else "
                        "the CPU), cpu, cuda, cuda:N, mps, xpu, ... (default auto)")
    p.add_argument("--dtype", default="float32", choices=DTYPES,
                   help="the model's weights and activations (default float32)")


def _device_count(kind: str) -> int:
    """How many devices of type ``kind`` torch sees (0 where its backend is unavailable)."""
    import torch
    if kind == "cpu":
        return 1
    if kind == "mps":
        return int(torch.backends.mps.is_available())
    backend = getattr(torch, kind, None)
    is_available = getattr(backend, "is_available", None)
    if is_available is None or not is_available():
        return 0
    count = getattr(backend, "device_count", None)
    return int(count()) if count is not None else 1


def resolve_device(name: str, option: str = "--device") -> str:
    """The device string to run on: ``auto`` -> ``cuda`` when torch sees a CUDA GPU, else
    ``cpu``; any other string is returned as given once torch parses it and the device
    exists here (UserError naming ``option`` otherwise)."""
    import torch
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(name)
    except (RuntimeError, TypeError, ValueError):
        raise UserError(f"{option} {name!r} is not a device: use auto, cpu, cuda, cuda:N, "
                        f"mps or xpu") from None
    if device.type in REFUSED_TYPES:
        raise UserError(f"{option} {name!r}: models cannot run on the {device.type} device; "
                        f"use auto, cpu, cuda, cuda:N, mps or xpu")
    count = _device_count(device.type)
    if count == 0:
        raise UserError(f"{option} {name!r} was asked for but torch sees no GPU of type "
                        f"{device.type!r} on this machine")
    if device.index is not None and device.index >= count:
        raise UserError(f"{option} {name!r} was asked for but torch sees {count} GPU(s) "
                        f"of type {device.type!r}, numbered 0..{count - 1}")
    return name
