"""Argument types and option checks shared by the commands.

- argparse ``type`` functions (argparse names the option and exits 2): comma-separated
  lists (:func:`int_list`, :func:`float_list`, :func:`name_list`), :func:`positive_float`,
  and :func:`path_arg`. An empty string given for a path would mean the current directory to
  the file system (``--out ""`` writes into it, ``--data ""`` reads everything below it); no
  command wants that, so it is refused.
- :func:`check_seed`, called by a command's ``run``: a one-line
  :class:`~posenc.errors.UserError` naming the option, as the commands' other checks do; the
  range and the check are the library's own
  (:func:`posenc.encodings.checks.require_seed`).
"""

from __future__ import annotations

import argparse
import math
import os

from ..encodings.checks import require_seed


def _numbers(text: str, kind: type, what: str) -> tuple:
    try:
        values = tuple(kind(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated {what}, got {text!r}"
                                         ) from None
    if not values:
        raise argparse.ArgumentTypeError(f"expected at least one of the {what}")
    return values


def int_list(text: str) -> tuple[int, ...]:
    """``"16,32,64"`` -> ``(16, 32, 64)``; an argparse error for anything else."""
    return _numbers(text, int, "integers")


def float_list(text: str) -> tuple[float, ...]:
    """``"0,0.5,1"`` -> ``(0.0, 0.5, 1.0)``; an argparse error for anything else."""
    return _numbers(text, float, "numbers")


def name_list(text: str) -> tuple[str, ...]:
    """``"rope, alibi"`` -> ``("rope", "alibi")``; an argparse error when empty."""
    values = tuple(v.strip() for v in text.split(",") if v.strip())
    if not values:
        raise argparse.ArgumentTypeError("expected at least one name")
    return values


def path_arg(text: str) -> str:
    """A path option's value, unchanged; ArgumentTypeError if it is empty, holds a NUL or is
    a symbolic link to nothing (a loop, a missing target)."""
    if text == "":
        raise argparse.ArgumentTypeError("an empty path is not allowed (for the current "
                                         "directory write '.')")
    if "\0" in text:
        raise argparse.ArgumentTypeError("a path cannot hold a NUL character")
    if os.path.lexists(text) and not os.path.exists(text):
        raise argparse.ArgumentTypeError(f"{text} is a symbolic link that leads nowhere (a "
                                         "loop or a missing target)")
    return text


def positive_float(text: str) -> float:
    """A finite float > 0 (a size, a limit in GiB)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text!r}")
    return value


def check_seed(option: str, value: int | None) -> None:
    """UserError naming ``option`` unless ``value`` is None or a seed in the library's range
    (:func:`posenc.encodings.checks.require_seed`: 0 .. 2**64 - 1, torch's)."""
    if value is not None:
        require_seed(option, value)
