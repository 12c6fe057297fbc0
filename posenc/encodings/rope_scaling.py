"""RoPE frequency scalings as pure functions: ``compute_inv_freq -> (inv_freq, attention_factor)``.

The scaling dicts are the ones Hugging Face uses for ``rope_scaling`` / ``rope_parameters``
(``{"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 2048}``), and the
numbers equal Hugging Face's init functions for every type both libraries have. posenc adds
``ntk`` (static NTK-aware base change ``theta' = theta * factor^(d / (d - 2))``) and a
``schedule`` for ``dynamic``:

- ``"stepped"`` (posenc's default): the length the base is grown for is the smallest
  ``original * 2^k`` at or above the sequence length, so the frequencies change only when a
  sequence crosses such a threshold. A KV cache then recomputes its history once per
  doubling (amortized linear decoding), and cached decoding equals a full forward under the
  same schedule. At every threshold length (``original * 2^k``, e.g. every power of two
  when ``original`` is one) it equals the per-token schedule; in between it uses the
  frequencies of the next threshold, never fewer interpolated ones than per-token.
- ``"per_token"``: Hugging Face's dynamic NTK, grown for the exact sequence length (a cache
  recomputes its history at every token past ``original``).

Validation raises; nothing is filled in silently except documented defaults (YaRN's
``beta_fast=32``, ``beta_slow=1``, ``truncate=True``). Everything is computed in fp32.

References: Chen et al. 2023 (position interpolation); bloc97 2023 (NTK-aware); emozilla 2023
(dynamic NTK); Peng et al. 2023 (YaRN); Meta 2024 (Llama 3.1); Ding et al. 2024 (LongRoPE).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import Tensor

from ..errors import UserError

# keys every type accepts, then the keys of each type (required ones first in REQUIRED)
_COMMON = {"rope_type", "type", "rope_theta"}
_KEYS: dict[str, set[str]] = {
    "default": set(),
    "linear": {"factor"},
    "ntk": {"factor"},
    "dynamic": {"factor", "original_max_position_embeddings", "schedule"},
    "yarn": {"factor", "original_max_position_embeddings", "attention_factor", "beta_fast",
             "beta_slow", "mscale", "mscale_all_dim", "truncate"},
    "llama3": {"factor", "original_max_position_embeddings", "low_freq_factor",
               "high_freq_factor"},
    "longrope": {"factor", "original_max_position_embeddings", "attention_factor",
                 "long_factor", "short_factor"},
}
REQUIRED: dict[str, tuple[str, ...]] = {
    "default": (),
    "linear": ("factor",),
    "ntk": ("factor",),
    "dynamic": ("factor", "original_max_position_embeddings"),
    "yarn": ("factor", "original_max_position_embeddings"),
    "llama3": ("factor", "original_max_position_embeddings", "low_freq_factor",
               "high_freq_factor"),
    "longrope": ("original_max_position_embeddings", "long_factor", "short_factor"),
}
#: types whose frequencies depend on the current sequence length
LENGTH_DEPENDENT = frozenset({"dynamic", "longrope"})
#: how ``dynamic`` follows the sequence length (module docstring)
DYNAMIC_SCHEDULES = ("stepped", "per_token")


def scaling_keys(kind: str) -> frozenset[str]:
    """The keys a scaling dict of type ``kind`` may hold (besides ``rope_type``)."""
    return frozenset(_KEYS[kind])


def scaling_types() -> list[str]:
    """Every scaling type ``compute_inv_freq`` accepts."""
    return sorted(_KEYS)


def scaling_type(scaling: Mapping[str, Any] | None) -> str:
    """The type name of a scaling dict (``rope_type`` or the legacy ``type`` key)."""
    if scaling is None:
        return "default"
    if not isinstance(scaling, Mapping):
        raise UserError(f"scaling must be a dict like {{'rope_type': 'linear', 'factor': 2.0}},"
                         f" got {scaling!r}")
    kind = scaling.get("rope_type", scaling.get("type"))
    if kind is None:
        raise UserError(f"scaling needs 'rope_type'; valid types: {', '.join(scaling_types())}")
    if kind not in _KEYS:
        raise UserError(f"unknown scaling type {kind!r}; valid types: "
                         f"{', '.join(scaling_types())}")
    return kind


def validate_scaling(scaling: Mapping[str, Any] | None, rotary_dim: int | None = None
                     ) -> dict[str, Any] | None:
    """Check a scaling dict and return a normalized copy (``rope_type`` key) or None.

    Raises UserError for an unknown type or key, a missing required key, or a value out of
    range, naming the key and the valid range.
    """
    kind = scaling_type(scaling)
    if scaling is None:
        return None
    valid = _KEYS[kind] | _COMMON
    unknown = sorted(set(scaling) - valid)
    if unknown:
        raise UserError(f"unknown key(s) {', '.join(unknown)} for scaling type {kind!r}; valid "
                         f"keys: {', '.join(sorted(valid - {'type'}))}")
    out = {k: v for k, v in scaling.items() if k != "type"}
    out["rope_type"] = kind
    for key in REQUIRED[kind]:
        if out.get(key) is None:
            raise UserError(f"scaling type {kind!r} needs {key!r}")
    factor = out.get("factor")
    if factor is not None or kind in ("linear", "ntk", "dynamic", "yarn", "llama3"):
        _positive(kind, "factor", factor)
        if kind in ("ntk", "yarn", "llama3") and factor < 1:
            raise UserError(f"scaling {kind!r}: factor must be >= 1, got {factor!r}")
    if kind == "dynamic" and out.get("schedule", "stepped") not in DYNAMIC_SCHEDULES:
        raise UserError(f"scaling 'dynamic': schedule must be one of "
                         f"{', '.join(map(repr, DYNAMIC_SCHEDULES))}, got {out['schedule']!r}")
    if "original_max_position_embeddings" in out:
        omp = out["original_max_position_embeddings"]
        if isinstance(omp, bool) or not isinstance(omp, int) or omp < 1:
            raise UserError(f"scaling {kind!r}: original_max_position_embeddings must be a "
                             f"positive int, got {omp!r}")
    for key in ("attention_factor", "beta_fast", "beta_slow", "mscale", "mscale_all_dim",
                "low_freq_factor", "high_freq_factor", "rope_theta"):
        if out.get(key) is not None:
            _positive(kind, key, out[key])
    if kind == "llama3" and out["high_freq_factor"] <= out["low_freq_factor"]:
        raise UserError("scaling 'llama3': high_freq_factor must be > low_freq_factor, got "
                         f"{out['high_freq_factor']} <= {out['low_freq_factor']}")
    if kind == "longrope":
        if out.get("factor") is None and out.get("attention_factor") is None:
            raise UserError("scaling 'longrope' needs 'factor' (or an explicit "
                             "'attention_factor') to set the attention factor")
        for key in ("long_factor", "short_factor"):
            vals = out[key]
            if not isinstance(vals, (list, tuple)) or not all(
                    isinstance(v, (int, float)) and v > 0 for v in vals):
                raise UserError(f"scaling 'longrope': {key} must be a list of positive numbers")
            if rotary_dim is not None and len(vals) != rotary_dim // 2:
                raise UserError(f"scaling 'longrope': {key} needs rotary_dim/2 = "
                                 f"{rotary_dim // 2} values, got {len(vals)}")
    return out


def _positive(kind: str, key: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 \
            or not math.isfinite(value):
        raise UserError(f"scaling {kind!r}: {key} must be a positive number, got {value!r}")


def base_inv_freq(dim: int, theta: float) -> Tensor:
    """Unscaled frequencies theta^(-2i/dim), i = 0..dim/2-1, fp32: (dim/2,)."""
    return 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))


def _linear(dim: int, theta: float, p: dict, seq_len: int | None) -> tuple[Tensor, float]:
    return base_inv_freq(dim, theta) / p["factor"], 1.0


def _ntk(dim: int, theta: float, p: dict, seq_len: int | None) -> tuple[Tensor, float]:
    return base_inv_freq(dim, theta * p["factor"] ** (dim / (dim - 2))), 1.0


def dynamic_length(seq_len: int | None, original: int, schedule: str = "stepped") -> int:
    """The length dynamic NTK grows its base for: ``original`` up to it; past it the exact
    ``seq_len`` (per_token) or the smallest ``original * 2^k >= seq_len`` (stepped)."""
    length = original if seq_len is None else max(int(seq_len), original)
    if schedule == "stepped":
        threshold = original
        while threshold < length:
            threshold *= 2
        return threshold
    return length


def frequency_key(scaling: Mapping[str, Any] | None, seq_len: int | None) -> object | None:
    """A host value that fixes the frequencies of a length-dependent scaling at ``seq_len``
    (equal keys, equal frequencies): dynamic's effective length, longrope's choice of
    factors; None for the other types, whose frequencies never change."""
    kind = scaling_type(scaling)
    if kind == "dynamic":
        return dynamic_length(seq_len, scaling["original_max_position_embeddings"],
                              scaling.get("schedule", "stepped"))
    if kind == "longrope":        # a branch, so a traced length gives a plain bool
        return True if seq_len is not None and seq_len > scaling[
            "original_max_position_embeddings"] else False
    return None


def _dynamic(dim: int, theta: float, p: dict, seq_len: int | None) -> tuple[Tensor, float]:
    original, factor = p["original_max_position_embeddings"], p["factor"]
    seq_len = dynamic_length(seq_len, original, p.get("schedule", "stepped"))
    base = theta * ((factor * seq_len / original) - (factor - 1)) ** (dim / (dim - 2))
    return base_inv_freq(dim, base), 1.0


def yarn_mscale(scale: float, mscale: float = 1.0) -> float:
    """YaRN's attention temperature 0.1 * mscale * ln(s) + 1 (1 for s <= 1)."""
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def softmax_mscale(scaling: dict | None) -> float:
    """The factor DeepSeek puts on the softmax scale under YaRN: ``yarn_mscale(factor,
    mscale_all_dim) ** 2`` when the scaling gives ``mscale_all_dim`` (DeepSeek-V2's released
    code; transformers' ``yarn_apply_mscale``), 1 otherwise. With ``mscale`` it makes the
    logits' temperature that of the cos/sin factor's whole head."""
    if not scaling or not scaling.get("mscale_all_dim") or \
            scaling.get("rope_type", "default") == "default":
        return 1.0
    mscale = yarn_mscale(scaling["factor"], scaling["mscale_all_dim"])
    return mscale * mscale


def _yarn(dim: int, theta: float, p: dict, seq_len: int | None) -> tuple[Tensor, float]:
    factor, original = p["factor"], p["original_max_position_embeddings"]
    attention_factor = p.get("attention_factor")
    if attention_factor is None:
        if p.get("mscale") and p.get("mscale_all_dim"):
            attention_factor = yarn_mscale(factor, p["mscale"]) / yarn_mscale(
                factor, p["mscale_all_dim"])
        else:
            attention_factor = yarn_mscale(factor)
    beta_fast, beta_slow = p.get("beta_fast") or 32.0, p.get("beta_slow") or 1.0

    def correction_dim(n_rotations: float) -> float:
        # the dimension whose wavelength fits n_rotations times in the original context
        return dim * math.log(original / (n_rotations * 2 * math.pi)) / (2 * math.log(theta))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if p.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001
    ramp = ((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low)).clamp(0, 1)
    extrapolate = 1.0 - ramp                       # 1: keep the frequency, 0: interpolate
    inv_freq = base_inv_freq(dim, theta)
    inv_freq = inv_freq / factor * (1 - extrapolate) + inv_freq * extrapolate
    return inv_freq, float(attention_factor)


def _llama3(dim: int, theta: float, p: dict, seq_len: int | None) -> tuple[Tensor, float]:
    factor, original = p["factor"], p["original_max_position_embeddings"]
    low_ff, high_ff = p["low_freq_factor"], p["high_freq_factor"]
    inv_freq = base_inv_freq(dim, theta)
    wavelen = 2 * math.pi / inv_freq
    low_wavelen, high_wavelen = original / low_ff, original / high_ff
    scaled = torch.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)
    smooth = (original / wavelen - low_ff) / (high_ff - low_ff)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
    return torch.where(medium, smoothed, scaled), 1.0


def _longrope(dim: int, theta: float, p: dict, seq_len: int | None) -> tuple[Tensor, float]:
    original = p["original_max_position_embeddings"]
    attention_factor = p.get("attention_factor")
    if attention_factor is None:
        factor = p["factor"]
        attention_factor = 1.0 if factor <= 1 else math.sqrt(
            1 + math.log(factor) / math.log(original))
    long = seq_len is not None and seq_len > original
    ext = torch.tensor(p["long_factor"] if long else p["short_factor"], dtype=torch.float32)
    return base_inv_freq(dim, theta) / ext, float(attention_factor)


_INIT: dict[str, Callable[[int, float, dict, int | None], tuple[Tensor, float]]] = {
    "default": lambda dim, theta, p, seq_len: (base_inv_freq(dim, theta), 1.0),
    "linear": _linear,
    "ntk": _ntk,
    "dynamic": _dynamic,
    "yarn": _yarn,
    "llama3": _llama3,
    "longrope": _longrope,
}


def compute_inv_freq(head_dim: int, theta: float = 10000.0,
                     scaling: Mapping[str, Any] | None = None,
                     seq_len: int | None = None) -> tuple[Tensor, float]:
    """Frequencies and attention factor for RoPE over ``head_dim`` rotated dimensions.

    Args:
        head_dim: number of rotated dimensions d (even; the rotary dim for partial rotary).
        theta: the RoPE base.
        scaling: a Hugging Face style scaling dict, or None for plain RoPE.
        seq_len: current sequence length (used by ``dynamic`` and ``longrope``).

    Returns:
        ``inv_freq`` (d/2,) fp32 and ``attention_factor``, the multiplier Hugging Face applies
        to cos and sin (so logits scale by its square).
    """
    if isinstance(head_dim, bool) or not isinstance(head_dim, int) or head_dim < 2 \
            or head_dim % 2:
        raise UserError(f"head_dim (rotated dims) must be an even integer >= 2, got {head_dim!r}")
    if not (isinstance(theta, (int, float)) and theta > 1):
        raise UserError(f"theta must be a number > 1, got {theta!r}")
    params = validate_scaling(scaling, rotary_dim=head_dim)
    kind = scaling_type(params)
    if params is not None and params.get("rope_theta") not in (None, theta):
        raise UserError(f"scaling rope_theta={params['rope_theta']} conflicts with "
                         f"theta={theta}; give one value")
    return _INIT[kind](head_dim, float(theta), params or {}, seq_len)
