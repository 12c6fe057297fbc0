"""``--device`` / ``--dtype``: the same two options on every command that runs a model."""

from __future__ import annotations

import argparse

from ..errors import UserError

DEVICES = ("auto", "cpu", "cuda")
DTYPES = ("float32", "bfloat16")


def add_device_arguments(p: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    p.add_argument("--device", default="auto", choices=DEVICES,
                   help="where the model runs (auto: the GPU when there is one)")
    p.add_argument("--dtype", default="float32", choices=DTYPES,
                   help="the model's weights and activations (default float32)")


def resolve_device(name: str) -> str:
    """``auto`` -> the GPU when there is one, else the CPU; ``cuda`` without one: ValueError."""
    import torch
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise UserError("--device cuda was asked for but torch sees no GPU")
    return name
