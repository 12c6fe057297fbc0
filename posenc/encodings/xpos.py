"""xPos: rotary embedding with an exponential decay (Sun et al., 2022, "A Length-Extrapolatable
Transformer").

Each rotated pair i of q at position m is also scaled by zeta_i^(m / scale_base), and of k at
position n by zeta_i^(-n / scale_base), with

    zeta_i = (2i / R + gamma) / (1 + gamma),   i = 0 .. R/2 - 1,  gamma = 0.4,

so q_m . k_n = sum_i zeta_i^((m - n) / scale_base) * (RoPE term of pair i): it depends only on
m - n, and since zeta_i < 1 the high-frequency pairs decay with distance (m >= n in a decoder).
Without a causal mask (encoders) keys after the query get factors above 1 instead: the decay
is one-sided, as in the paper, which targets decoders.

Overflow. The two factors are exp(±(m - c) ln(zeta_i) / scale_base) for any offset c (it
cancels in q.k). The reference implementation centres positions on the middle of the current
sequence; a KV cache needs the offset fixed, so here c = ``center`` (default max_len // 2, or
0 without max_len) and cached keys stay exact. The factors overflow (fp32: ~1e38) once
|pos - c| * ln(1/zeta_0) / scale_base nears the dtype's exponent range: with scale_base 512 and
gamma 0.4 that is |pos - c| of about 34,000 in fp32/bf16 and 2,000 in fp16. Positions that far
from the centre raise UserError (set ``center`` or a larger ``scale_base``) instead of
returning inf.

Built on :class:`RotaryEncoding` (same theta, layout, rotary_dim and frequency scalings); the
decay is folded into the cos/sin passed to ``apply_rotary``, so rotation and scaling are one
pass. Dimensions past ``rotary_dim`` are neither rotated nor scaled.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ..errors import UserError
from ..kernels.rotary import apply_rotary
from .base import register
from .checks import check_in_range, check_qk, require_float_in
from .context import HookContext
from .limits import PositionLimit
from .rope import RotaryEncoding

#: exponent headroom kept inside the dtype's normal range, for the magnitude of q and k
_HEADROOM = math.log(1e2)


def xpos_zeta(rotary_dim: int, gamma: float = 0.4) -> Tensor:
    """Per-pair decay base zeta_i = (2i/R + gamma) / (1 + gamma): (R/2,) fp32, in (0, 1)."""
    i = torch.arange(0, rotary_dim, 2, dtype=torch.float32)
    return (i / rotary_dim + gamma) / (1.0 + gamma)


@register("xpos")
class XPosEncoding(RotaryEncoding):
    """RoPE with per-pair exponential decay of q.k with distance.

    Options (besides RoPE's theta, layout, rotary_dim, scaling):
        scale_base: distance scale of the decay (> 0, default 512).
        gamma: zeta offset (> 0, default 0.4).
        center: position offset c of the scales (any int; default max_len // 2 or 0).
    """

    extrapolates = "partly (decay damps long distances; the paper adds blockwise attention)"
    cache_note = "exact (keys cached transformed; fixed center)"

    def __init__(self, *, scale_base: float = 512.0, gamma: float = 0.4,
                 center: int | None = None, **kw) -> None:
        super().__init__(**kw)
        self.scale_base = require_float_in("scale_base", scale_base, 0.0, float("inf"))
        self.gamma = require_float_in("gamma", gamma, 0.0, float("inf"))
        if center is None:
            center = 0 if self.max_len is None else self.max_len // 2
        if isinstance(center, bool) or not isinstance(center, int):
            raise UserError(f"center must be an integer (any sign), got {center!r}")
        self.center = center
        zeta = xpos_zeta(self.rotary_dim, self.gamma)
        self.register_buffer("log_zeta", zeta.log(), persistent=False)      # (R/2,) fp32
        self.steepest = -math.log(float(zeta.min()))          # ln(1 / zeta_0), a host value

    def max_distance(self, dtype: torch.dtype) -> int:
        """Largest |pos - center| whose scales stay finite in ``dtype`` (with headroom)."""
        info = torch.finfo(dtype)
        limit = min(math.log(info.max), -math.log(info.tiny)) - _HEADROOM
        return int(limit * self.scale_base / self.steepest)

    @property
    def position_limit(self) -> PositionLimit:
        """The farthest position above ``center`` whose scales stay finite in the dtype of
        the encoding's buffers (the model's dtype; under autocast to float16 the forward
        refuses sooner). Positions below ``center - max_distance`` are refused too."""
        dtype = self.log_zeta.dtype
        return PositionLimit(self.center + self.max_distance(dtype), "xpos",
                             f"range in {str(dtype).removeprefix('torch.')}",
                             encoding=self.name)

    def decay(self, pos: Tensor, sign: float, dtype: torch.dtype) -> Tensor:
        """zeta^(sign * (pos - center) / scale_base): (..., L, R/2) fp32 for pos (..., L);
        UserError on overflow
        (checked as :func:`~posenc.encodings.checks.check_in_range` does)."""
        far = self.max_distance(dtype)
        check_in_range(pos, self.center - far, self.center + far + 1, lambda bad: (
            f"xpos scale overflows {dtype} at position {bad}, too far from center="
            f"{self.center}: |pos - center| must be <= {far} for scale_base="
            f"{self.scale_base}; set center nearer the positions or a larger scale_base"))
        rel = pos.to(torch.float32) - float(self.center)                    # (L,)
        return torch.exp(sign * rel[..., None] * self.log_zeta / self.scale_base)

    def transform_qk(self, q: Tensor, k: Tensor, at: HookContext) -> tuple[Tensor, Tensor]:
        q_pos, k_pos = at.q_pos, at.k_pos
        check_qk(self, q, k, at)        # float q/k: integer ones would truncate
        seq_len, long = self.sequence_length(q_pos, k_pos)
        k_cos, k_sin = self.cos_sin(k_pos, seq_len, long)                    # (Lk, R/2)
        k_scale = self.decay(k_pos, -1.0, k.dtype)
        if q_pos is k_pos:
            q_cos, q_sin, q_scale = k_cos, k_sin, 1.0 / k_scale
        else:
            q_cos, q_sin = self.cos_sin(q_pos, seq_len, long)                # (Lq, R/2)
            q_scale = self.decay(q_pos, 1.0, q.dtype)
        return (apply_rotary(q, q_cos * q_scale, q_sin * q_scale, self.layout),
                apply_rotary(k, k_cos * k_scale, k_sin * k_scale, self.layout))

    def extra_repr(self) -> str:
        return (f"{super().extra_repr()}, scale_base={self.scale_base}, gamma={self.gamma}, "
                f"center={self.center}")
