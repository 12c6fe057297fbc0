"""Option checks shared by several commands: a positive float and a seed torch accepts.

:func:`positive_float` is an argparse ``type`` (argparse names the option and exits 2);
:func:`check_seed` is called by a command's ``run`` and raises a one-line
:class:`~posenc.errors.UserError` naming the option, as the commands' other checks do.
"""

from __future__ import annotations

import argparse
import math

from ..errors import UserError

#: the largest seed ``torch.manual_seed`` and ``torch.Generator.manual_seed`` accept
MAX_SEED = 2**64 - 1


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
    """UserError naming ``option`` unless ``value`` is None or in 0 .. 2**64 - 1, the range
    torch's seeding accepts."""
    if value is not None and not 0 <= value <= MAX_SEED:
        raise UserError(f"{option} must be between 0 and 2**64 - 1 ({MAX_SEED}), got {value}")
