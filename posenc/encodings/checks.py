"""Argument checks shared by encodings, models and configs: options (plain Python values)
and tensors (positions, q/k, token ids). Each raises UserError naming the argument, what it
must be and what it got; tensor checks read metadata only, except :func:`check_in_range`,
which is routed by device type so that no check synchronises with an accelerator."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import torch
from torch import Tensor

from ..errors import UserError


# ---------------------------------------------------------------- validation
def require_known_keys(what: str, data: Any, valid: Iterable[str]) -> dict[str, Any]:
    """``data`` as a dict whose keys are all in ``valid``; UserError naming ``what`` (e.g.
    "LMConfig") and the unknown keys otherwise, or when ``data`` is not a mapping."""
    if not isinstance(data, Mapping):
        raise UserError(f"{what} must be a mapping of option names to values, got "
                        f"{type(data).__name__}")
    valid = set(valid)
    unknown = sorted(str(key) for key in set(data) - valid)
    if unknown:
        raise UserError(f"unknown {what} key(s) {', '.join(unknown)}; valid: "
                        f"{', '.join(sorted(valid))}")
    return dict(data)


def require_divides(n_heads: int, d_model: int) -> None:
    """UserError unless ``n_heads`` divides ``d_model`` (both already positive ints)."""
    if d_model % n_heads:
        raise UserError(f"n_heads={n_heads} must divide d_model={d_model}; valid n_heads are "
                        f"its divisors")


def require_distinct(option: str, values: Any) -> None:
    """UserError naming what ``option`` (a list option: lengths, depths, methods, encodings,
    scalings, seeds) lists more than once; every list option refuses duplicates alike."""
    values = list(values)
    repeated = []
    for i, value in enumerate(values):
        if value in values[:i] and value not in repeated:
            repeated.append(value)
    if repeated:
        raise UserError(f"{option} lists {', '.join(map(str, repeated))} more than once; give "
                        f"each once, got {', '.join(map(str, values))}")


def require_positive_int(option: str, value: Any) -> None:
    require_int_at_least(option, value, 1)


def require_int_at_least(option: str, value: Any, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise UserError(f"{option} must be an integer >= {low}, got {value!r}")


#: the largest seed ``torch.manual_seed`` and ``torch.Generator.manual_seed`` accept
MAX_SEED = 2**64 - 1


def require_seed(option: str, value: Any) -> None:
    """UserError naming ``option`` (the caller's spelling: "seed", "--seed") unless ``value``
    is an integer in 0 .. 2**64 - 1, the range torch's seeding accepts: the one seed range
    of the library and the commands."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_SEED:
        raise UserError(f"{option} must be between 0 and 2**64 - 1 ({MAX_SEED}), got "
                        f"{value!r}")


def require_float_in(option: str, value: Any, low: float, high: float,
                     low_open: bool = True, high_open: bool = True) -> float:
    """Check ``low < value < high`` (bounds open or closed); return it as a float."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if ok:
        ok = (value > low if low_open else value >= low) and (
            value < high if high_open else value <= high)
    if not ok:
        lo, hi = ("(" if low_open else "["), (")" if high_open else "]")
        raise UserError(f"{option} must be a number in {lo}{low}, {high}{hi}, got {value!r}")
    return float(value)


def require_choice(option: str, value: Any, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise UserError(f"{option} must be one of {', '.join(map(repr, choices))}, "
                         f"got {value!r}")
    return value


# ------------------------------------------------------------ tensor checks
def _is_integer(t: Tensor) -> bool:
    return not (t.is_floating_point() or t.is_complex() or t.dtype == torch.bool)


def check_positions(name: str, pos: Any, length: int | None, batch: int | None = None
                    ) -> None:
    """Positions must be an integer tensor of shape (length,), shared by every sequence of
    the batch, or (batch, length), one row per sequence (any length or batch if None).
    Metadata only (no sync). A model calls it once per forward, not per layer.

    Raises UserError naming ``name``, the expected and the actual shape or dtype.
    """
    if not isinstance(pos, Tensor) or not _is_integer(pos):
        got = f"dtype {pos.dtype}" if isinstance(pos, Tensor) else type(pos).__name__
        raise UserError(f"{name} must be an integer tensor of positions, got {got}")
    check_position_shape(name, pos, length, batch)


def check_position_shape(name: str, pos: Tensor, length: int | None,
                         batch: int | None = None) -> None:
    """The shape part of :func:`check_positions`, for positions already checked once (a
    hook comparing them with its q and k)."""
    _check_shape(name, pos, (), length, batch, "one position per token")


def check_axis_positions(name: str, axes: Any, n_axes: int, length: int | None,
                         batch: int | None = None) -> None:
    """Positions along ``n_axes`` axes (M-RoPE's temporal, height, width; a grid's row and
    column) must be an integer tensor of shape (n_axes, length), shared by the batch, or
    (n_axes, batch, length) (any length or batch if None). Metadata only (no sync)."""
    if not isinstance(axes, Tensor) or not _is_integer(axes):
        got = f"dtype {axes.dtype}" if isinstance(axes, Tensor) else type(axes).__name__
        raise UserError(f"{name} must be an integer tensor of positions, got {got}")
    _check_shape(name, axes, (n_axes,), length, batch, "one position per axis and token")


def _check_shape(name: str, t: Tensor, lead: tuple[int, ...], length: int | None,
                 batch: int | None, what: str) -> None:
    """UserError unless ``t`` is (*lead, length) or (*lead, batch, length) (any length or
    batch where None)."""
    shape, k = tuple(t.shape), len(lead)
    ok = len(shape) in (k + 1, k + 2) and shape[:k] == lead and (
        length is None or shape[-1] == length) and (
        len(shape) == k + 1 or batch is None or shape[k] == batch)
    if not ok:
        head = "".join(f"{d}, " for d in lead)
        n = "length" if length is None else str(length)
        rows = "batch" if batch is None else str(batch)
        one = f"({head}{n},)" if not lead else f"({head}{n})"
        raise UserError(f"{name} must have shape {one} or ({head}{rows}, {n}), {what}, got "
                        f"shape {shape}")


def check_qk(encoding: Any, q: Any, k: Any, at: Any, *, bias: bool = False) -> None:
    """Arguments of a hook: floating-point q (B, H, Lq, D) and k (B, H', Lk, D) whose lengths
    match the positions of ``at`` (a HookContext: (Lq,) or (B, Lq) and (Lk,) or (B, Lk)).
    For a per-head ``bias`` hook, q and k may be None (the term depends on positions only)
    and a given q must have the encoding's n_heads. Metadata only (no sync)."""
    for name, x, pos in (("q", q, at.q_pos), ("k", k, at.k_pos)):
        if x is None and bias:
            continue
        if not isinstance(x, Tensor) or x.dim() != 4 or not x.is_floating_point():
            got = (f"shape {tuple(x.shape)}, dtype {x.dtype}" if isinstance(x, Tensor)
                   else type(x).__name__)
            raise UserError(f"{name} must be a floating-point tensor (batch, heads, length, "
                             f"head_dim), got {got}")
        check_position_shape(f"{name}_pos", pos, x.shape[2], x.shape[0])
    if bias and q is not None and q.shape[1] != encoding.n_heads:
        raise UserError(f"q has {q.shape[1]} heads but this {encoding.name or 'encoding'} "
                         f"was built for n_heads={encoding.n_heads}")


def check_direction(encoding: Any, causal: bool) -> None:
    """UserError if attention without a causal mask calls an encoding built in its causal
    form (its ``bidirectional`` is False: keys after the query would get a meaningless
    term). An encoding without a ``bidirectional`` attribute serves both."""
    if not causal and getattr(encoding, "bidirectional", True) is False:
        raise UserError(f"this {encoding.name or 'encoding'} is built for causal attention "
                        f"(bidirectional=False); build it with bidirectional=True for "
                        f"attention without a causal mask (encoders)")


def check_in_range(values: Tensor, low: float | None, high: float | None,
                   message: Callable[[object], str]) -> None:
    """Every value must lie in [low, high) (None: unbounded on that side).

    Needs the values, so it is routed by device type: on the CPU it checks eagerly and raises
    UserError(message(a value outside)); on CUDA a device-side assert (no host
    synchronisation; it reports when the kernel runs, with message("a value")); elsewhere
    and under torch.compile nothing is checked. Call it once per forward, not per layer.
    """
    if values.numel() == 0 or torch.compiler.is_compiling():
        return
    if values.device.type == "cpu":
        lo, hi = torch.aminmax(values)
        if low is not None and lo < low:
            raise UserError(message(lo.item()))
        if high is not None and hi >= high:
            raise UserError(message(hi.item()))
    elif values.device.type == "cuda":
        ok = torch.ones((), dtype=torch.bool, device=values.device)
        if low is not None:
            ok = ok & (values >= low).all()
        if high is not None:
            ok = ok & (values < high).all()
        torch._assert_async(ok, message("a value"))


def check_token_ids(name: str, ids: Any, vocab_size: int) -> None:
    """Token ids must be an integer tensor with values in [0, vocab_size) (the range as
    :func:`check_in_range` checks it)."""
    if not isinstance(ids, Tensor) or ids.dtype not in (torch.int64, torch.int32):
        got = f"dtype {ids.dtype}" if isinstance(ids, Tensor) else type(ids).__name__
        raise UserError(f"{name} must be a tensor of token ids (int64 or int32), got {got}")

    check_in_range(ids, 0, vocab_size, lambda bad: (
        f"{name} holds token id {bad}, outside the vocabulary [0, {vocab_size})"))


def require_options(option: str, value: Any) -> dict[str, Any]:
    """An encoding-options dict: None means {} (no options); a copy is returned."""
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(key, str) for key in value):
        raise UserError(f"{option} must be a dict of encoding options (or None for none), "
                         f"got {value!r}")
    return dict(value)
