"""KERPLE: kernelized relative positional embedding (Chi et al., 2022).

Each head adds a conditionally positive definite kernel of the distance |i - j| to its logits:

- ``variant="log"``:   -r1 * log(1 + r2 * |i - j|)      r1, r2 > 0
- ``variant="power"``: -r1 * |i - j| ** r2              r1 > 0, 0 < r2 <= 2

r1 and r2 are learned per head. The reference code clamps raw parameters at 1e-2 (and r2 at
2) inside the forward pass; here they are kept in range by a smooth parametrisation instead
(r = softplus(raw); power r2 = 2 * sigmoid(raw)), which never cuts gradients. Initial values
follow the reference: r1 ~ U(0, 2), r2 ~ U(0, 1) (floored at 1e-2). Each layer has its own
parameters (as in the reference). The bias depends on |i - j| only, so the same encoding
serves decoders (under the causal mask) and encoders.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .base import register
from .checks import require_choice
from .relative_bias import BiasFunction, DistanceBiasEncoding

_FLOOR = 1e-2


def _inverse_softplus(y: Tensor) -> Tensor:
    return y + torch.log(-torch.expm1(-y))


def _logit(p: Tensor) -> Tensor:
    return torch.log(p) - torch.log1p(-p)


@register("kerple")
class KerpleEncoding(DistanceBiasEncoding):
    """Learned logarithmic or power distance kernel per head.

    Options: ``variant`` ("log" | "power").
    """

    extrapolates = "yes"
    distance_only = True
    per_layer = True

    def __init__(self, *, variant: str = "log", **kw) -> None:
        super().__init__(**kw)
        self.variant = require_choice("variant", variant, ("log", "power"))
        r1 = (torch.rand(self.n_heads) * 2.0).clamp(min=_FLOOR)
        r2 = torch.rand(self.n_heads).clamp(min=_FLOOR)
        self.raw_r1 = nn.Parameter(_inverse_softplus(r1))
        self.raw_r2 = nn.Parameter(_inverse_softplus(r2) if variant == "log"
                                   else _logit(r2 / 2.0))

    @property
    def r1(self) -> Tensor:
        """Kernel scale per head: (H,), > 0."""
        return F.softplus(self.raw_r1)

    @property
    def r2(self) -> Tensor:
        """Log: rate (H,) > 0. Power: exponent (H,) in (0, 2)."""
        if self.variant == "log":
            return F.softplus(self.raw_r2)
        return 2.0 * torch.sigmoid(self.raw_r2)

    def bias_function(self) -> BiasFunction:
        r1, r2, log = self.r1.float(), self.r2.float(), self.variant == "log"

        def bias(rel: Tensor, head: Tensor) -> Tensor:
            dist = rel.abs().to(torch.float32)
            if log:
                return -r1[head] * torch.log1p(r2[head] * dist)
            # 0 ** r2 has an undefined gradient in r2 (0 * log 0): evaluate at 1 and zero it
            powered = dist.clamp(min=1.0) ** r2[head]
            return -r1[head] * torch.where(dist > 0, powered, torch.zeros_like(powered))

        return bias

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, variant={self.variant!r}"
