"""Argument types shared by the commands: comma-separated lists."""

from __future__ import annotations

import argparse


def int_list(text: str) -> tuple[int, ...]:
    """``"16,32,64"`` -> ``(16, 32, 64)``; an argparse error for anything else."""
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}")
    if not values:
        raise argparse.ArgumentTypeError("expected at least one integer")
    return values


def name_list(text: str) -> tuple[str, ...]:
    """``"rope, alibi"`` -> ``("rope", "alibi")``; an argparse error when empty."""
    values = tuple(v.strip() for v in text.split(",") if v.strip())
    if not values:
        raise argparse.ArgumentTypeError("expected at least one name")
    return values
