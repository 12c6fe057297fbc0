"""One JSON codec for every results file a study writes.

JSON has no infinities or NaNs; results hold them (a perplexity that overflowed, a loss that
diverged). :func:`encode` writes them as the strings ``"inf"``, ``"-inf"`` and ``"nan"`` (and
tuples as lists, keys as strings); :func:`decode` turns those strings back into floats.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from ..errors import UserError

NON_FINITE = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}


def encode(obj: Any) -> Any:
    """A JSON-safe copy of ``obj``: non-finite floats as strings, tuples as lists, dict keys
    as strings; anything else that JSON cannot hold becomes its ``str``."""
    if isinstance(obj, float):
        if math.isfinite(obj):
            return obj
        return "nan" if math.isnan(obj) else ("inf" if obj > 0 else "-inf")
    if obj is None or isinstance(obj, (bool, int, str)):
        return obj
    if isinstance(obj, dict):
        return {str(k): encode(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [encode(v) for v in obj]
    return str(obj)


def decode(obj: Any) -> Any:
    """``obj`` with the strings :func:`encode` wrote for non-finite floats made floats."""
    if isinstance(obj, dict):
        return {k: decode(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [decode(v) for v in obj]
    if isinstance(obj, str) and obj in NON_FINITE:
        return NON_FINITE[obj]
    return obj


def dumps(obj: Any) -> bytes:
    """The bytes of a results file: :func:`encode`, indented by 2, a final newline."""
    return (json.dumps(encode(obj), indent=2, allow_nan=False) + "\n").encode("utf-8")


def read_json(path: str | Path, what: str = "results file") -> Any:
    """The parsed JSON at ``path`` (not decoded: the strings for non-finite floats stay);
    a one-line UserError naming the file when it is not valid JSON."""
    path = Path(path)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        reason = err.msg if isinstance(err, json.JSONDecodeError) else "not UTF-8 text"
        raise UserError(f"{path} is not a valid {what} (not JSON: {reason})") from None
