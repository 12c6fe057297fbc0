"""Checks of the fields a figure reads from a results.json, for ``posenc plot``: a file
edited by hand or damaged is refused in one line naming the file and the field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import UserError


def is_number(value: Any) -> bool:
    """A value the figures can draw or skip: a number, None, a non-finite number as
    results.json spells it, or the note of a length a model could not serve ("n/a (...)")."""
    if isinstance(value, bool):
        return False
    return (value is None or isinstance(value, (int, float))
            or value in ("inf", "-inf", "nan")
            or (isinstance(value, str) and value.startswith("n/a")))


def is_length(value: Any) -> bool:
    """A positive integer, or its decimal string (results.json's length keys)."""
    if isinstance(value, bool):
        return False
    try:
        return int(value) >= 1 and str(int(value)) == str(value).strip()
    except (TypeError, ValueError):
        return False


def field_error(path: Path, field: str, what: str, value: Any) -> UserError:
    """The one-line refusal of ``field`` in the results file ``path``."""
    return UserError(f"{path}: {field} {what}, got {value!r}; fix or regenerate the file")
