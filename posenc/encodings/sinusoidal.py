"""Sinusoidal absolute positions (Vaswani et al., 2017), defined for any length.

PE[p, 2i] = sin(p / base^(2i/d)),  PE[p, 2i+1] = cos(p / base^(2i/d)).
Because PE[p+k] is a rotation of PE[p], the dot product PE[i].PE[j] depends only on i - j.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..errors import UserError
from .base import PositionalEncoding, register
from .checks import require_float_in


def sinusoidal_angles(pos: Tensor, dim: int, base: float = 10000.0) -> Tensor:
    """Angles p / base^(2i/dim) in fp32. pos: (..., T) -> (..., T, ceil(dim/2))."""
    inv_freq = base ** (-torch.arange(0, dim, 2, dtype=torch.float32, device=pos.device) / dim)
    return pos.to(torch.float32)[..., None] * inv_freq


def sinusoidal_at(pos: Tensor, dim: int, base: float = 10000.0) -> Tensor:
    """Sinusoidal vectors at arbitrary (even negative) positions. pos: (..., T) ->
    (..., T, dim) fp32."""
    angles = sinusoidal_angles(pos, dim, base)          # (..., T, ceil(dim/2))
    table = torch.stack((angles.sin(), angles.cos()), dim=-1)  # (..., T, ceil(dim/2), 2)
    return table.flatten(-2)[..., :dim]                  # (..., T, dim), sin/cos interleaved


def sinusoidal_table(n_positions: int, dim: int) -> Tensor:
    """The Vaswani table for positions 0..n_positions-1: (n_positions, dim), fp32."""
    if n_positions < 0 or dim < 1:
        raise UserError(f"need n_positions >= 0 and dim >= 1, got {n_positions}, {dim}")
    return sinusoidal_at(torch.arange(n_positions), dim)


@register("sinusoidal")
class SinusoidalEncoding(PositionalEncoding):
    """x_p + PE[p] with the fixed Vaswani table; no parameters, any length.

    Options: ``base`` (10000), ``scale`` multiplies the table (1.0).
    """

    family = "absolute"
    extrapolates = "no (defined at any length, but unseen positions hurt)"

    def __init__(self, *, base: float = 10000.0, scale: float = 1.0, **kw) -> None:
        super().__init__(**kw)
        self.base = require_float_in("base", base, 1.0, float("inf"))
        self.scale = require_float_in("scale", scale, 0.0, float("inf"))

    def embed(self, x: Tensor, pos: Tensor, *, ids: Tensor | None = None,
              state: dict | None = None) -> Tensor:
        pe = sinusoidal_at(pos, x.shape[-1], self.base).to(x.dtype)  # (T, C)
        return x + self.scale * pe
