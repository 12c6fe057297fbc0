"""ALiBi: attention with linear biases (Press et al., 2022).

Head h adds ``-m_h * |i - j|`` to its logits. Slopes form a geometric sequence starting at
2^(-8/n) for n heads (a power of two); for other head counts the paper (and BLOOM) take the
slopes of the closest smaller power of two, then every other slope of twice that count.

The bias is clipped to [-2^15, 2^15] (``BIAS_LIMIT``): in fp16 (largest finite 65504) the
raw ``m * (j - i)`` overflows to -inf past 131040 positions for slope 1/2, while a softmax
weight ``exp(-32768)`` is exactly zero in every float format, so the floor changes no weight
(the ceiling only touches the causal form's hidden pairs j > i).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ..errors import UserError
from .base import register
from .checks import require_positive_int
from .relative_bias import BiasFunction, DistanceBiasEncoding

#: largest bias magnitude: exact in fp16, with room for the logits it is added to
BIAS_LIMIT = 2.0 ** 15


def _power_of_two_slopes(n: int) -> list[float]:
    start = 2.0 ** (-8.0 / n)
    return [start ** (i + 1) for i in range(n)]


def alibi_slopes(n_heads: int) -> Tensor:
    """Canonical ALiBi slopes for ``n_heads`` heads: (n_heads,) fp32."""
    require_positive_int("n_heads", n_heads)
    closest = 2 ** int(math.floor(math.log2(n_heads)))
    slopes = _power_of_two_slopes(closest)
    if closest < n_heads:
        slopes += _power_of_two_slopes(2 * closest)[0::2][: n_heads - closest]
    return torch.tensor(slopes, dtype=torch.float32)


@register("alibi")
class ALiBiEncoding(DistanceBiasEncoding):
    """Fixed linear distance penalty per head; no parameters.

    Options: ``bidirectional`` (False: the causal form m*(j - i), which a causal mask limits
    to j <= i; True: the symmetric -m*|i - j| for encoders).
    """

    extrapolates = "yes"
    distance_only = True

    def __init__(self, *, bidirectional: bool = False, **kw) -> None:
        super().__init__(**kw)
        if not isinstance(bidirectional, bool):
            raise UserError(f"bidirectional must be True or False, got {bidirectional!r}")
        self.bidirectional = bidirectional
        self.register_buffer("slopes", alibi_slopes(self.n_heads), persistent=False)

    def bias_function(self) -> BiasFunction:
        slopes, bidirectional = self.slopes, self.bidirectional

        def bias(rel: Tensor, head: Tensor) -> Tensor:
            dist = rel.to(torch.float32)
            dist = -dist.abs() if bidirectional else dist         # j - i <= 0 where causal
            return (slopes[head] * dist).clamp(-BIAS_LIMIT, BIAS_LIMIT)

        return bias
