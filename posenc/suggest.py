"""A "did you mean" for names a user types (encodings, methods, options)."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def did_you_mean(name: object, valid: Iterable[str]) -> str:
    """``" (did you mean 'rope'?)"`` for the closest of ``valid`` to ``name`` (a case-only
    difference included: names are case-sensitive), or "" when none is close."""
    if not isinstance(name, str) or not name:
        return ""
    valid = list(valid)
    folded = {v.lower(): v for v in valid}
    if name.lower() in folded and folded[name.lower()] != name:
        return f" (did you mean {folded[name.lower()]!r}? names are case-sensitive)"
    close = difflib.get_close_matches(name, valid, n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""
