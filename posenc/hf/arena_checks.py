"""Checks of an arena request that need no model (:class:`posenc.hf.arena.ArenaRequest`), and
the lengths RULER's families run at."""

from __future__ import annotations

from typing import Any

from ..encodings.checks import require_choice, require_distinct, require_seed
from ..errors import UserError
from ..methods import parse_method_spec
from .load import MODEL_DTYPES
from .ruler import check_families


def check_request(req: Any) -> None:
    """Every option that can be checked without the model."""
    if not req.methods:
        raise UserError("give at least one method")
    require_distinct("methods", req.methods)
    for m in req.methods:
        if m != "all":
            parse_method_spec(m)
    require_choice("dtype", req.dtype, MODEL_DTYPES)
    if isinstance(req.factor, bool) or not isinstance(req.factor, (int, float)) \
            or not req.factor > 1:
        raise UserError(f"factor must be a number > 1, got {req.factor!r}")
    if req.original is not None and (isinstance(req.original, bool)
                                     or not isinstance(req.original, int) or req.original < 2):
        raise UserError(f"original length must be an integer >= 2, got {req.original!r}")
    if req.lengths is not None and (not req.lengths or any(
            isinstance(n, bool) or not isinstance(n, int) or n < 2 for n in req.lengths)):
        raise UserError(f"lengths must be integers >= 2, got {req.lengths!r}")
    if req.lengths is not None:
        require_distinct("lengths", req.lengths)
    if not req.multiples or any(isinstance(m, bool) or not isinstance(m, (int, float))
                                or not m > 0 for m in req.multiples):
        raise UserError(f"length multiples must be numbers > 0, got {list(req.multiples)}")
    if not req.depths or any(not 0 <= d <= 1 for d in req.depths):
        raise UserError(f"depths must be numbers in [0, 1], got {list(req.depths)}")
    require_distinct("depths", req.depths)
    for name, value, low in (("needles", req.needles, 1), ("passkey trials",
                                                           req.passkey_trials, 0),
                             ("eval_windows", req.eval_windows, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise UserError(f"{name} must be an integer >= {low}, got {value!r}")
    require_seed("seed", req.seed)
    check_families(tuple(req.tasks))
    if isinstance(req.ruler_samples, bool) or not isinstance(req.ruler_samples, int) \
            or req.ruler_samples < 1:
        raise UserError(f"ruler_samples must be an integer >= 1, got {req.ruler_samples!r}")
    if req.ruler_lengths is not None and (not req.ruler_lengths or any(
            isinstance(n, bool) or not isinstance(n, int) or n < 2 for n in req.ruler_lengths)):
        raise UserError(f"RULER lengths must be integers >= 2, got {req.ruler_lengths!r}")
    if req.ruler_lengths is not None:
        require_distinct("RULER lengths", req.ruler_lengths)


def ruler_lengths_of(req: Any, lengths: tuple[int, ...], original: int
                     ) -> tuple[tuple[int, ...], list[str]]:
    """(the lengths RULER's families run at, a note on those left out): ``ruler_lengths`` up
    to factor x ``original`` (the arena's lengths when None); none without tasks."""
    if not req.tasks:
        return (), []
    if req.ruler_lengths is None:
        return lengths, []
    most = max(round(req.factor * original), max(lengths))
    kept = tuple(sorted(n for n in req.ruler_lengths if n <= most))
    left = [n for n in req.ruler_lengths if n > most]
    if not kept:
        raise UserError(f"every RULER length ({', '.join(map(str, req.ruler_lengths))}) is "
                        f"longer than the {most} tokens the methods extend to; give shorter "
                        "RULER lengths or a larger factor")
    note = [f"RULER lengths beyond the {most} tokens the methods extend to are left out: "
            + ", ".join(map(str, left))] if left else []
    return kept, note
