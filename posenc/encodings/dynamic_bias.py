"""Dynamic position bias: a small MLP of the relative distance gives each head's bias.

Wang et al., "CrossFormer: A Versatile Vision Transformer Hinging on Cross-scale Attention",
2021 (ICLR 2022), Section 3.3 (dynamic position bias): the bias of a pair is an MLP of its
relative coordinate, so it serves any distance instead of a table of fixed size. Here in one
dimension, as x-transformers' ``DynamicPositionBias``: with d = i - j (query minus key),

    b_h(d) = MLP(d)_h,   MLP = Linear(1, W), SiLU, [Linear(W, W), SiLU] x (depth - 1),
                               Linear(W, H),

and with ``log_distance`` the log-spaced coordinate of Liu et al., "Swin Transformer V2:
Scaling Up Capacity and Resolution", CVPR 2022, Section 3.3: d -> sign(d) log(1 + |d|).

The MLP's input is clamped to |d| <= ``max_distance`` (default: ``max_len`` - 1, the longest
distance a model sees in training; None without max_len: 1024), so the bias is one small
table of 2 * max_distance + 1 distances per call: the materialized bias gathers from it and
the FlexAttention score_mod reads one entry per score (no (H, n, n) tensor, no MLP per pair).
Past it the bias stays that of the longest distance, as T5's buckets saturate; a larger
``max_distance`` lets the MLP extrapolate (x-transformers evaluates it at every distance
of the sequence) at the cost of a larger table.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ..errors import UserError
from .base import register
from .checks import require_positive_int
from .relative_bias import DistanceBiasEncoding

#: max_distance when neither it nor max_len is given
DEFAULT_MAX_DISTANCE = 1024


@register("dynamic_bias")
class DynamicBiasEncoding(DistanceBiasEncoding):
    """Learned MLP of the (optionally log-spaced) query-key distance, one output per head.

    Options: ``mlp_width`` (None: d_model // 4, as x-transformers), ``depth`` (2 hidden
    layers), ``log_distance`` (False), ``max_distance`` (None: max_len - 1).
    """

    extrapolates = "partly (an MLP of the distance, clamped at max_distance)"
    distance_only = True

    def __init__(self, *, mlp_width: int | None = None, depth: int = 2,
                 log_distance: bool = False, max_distance: int | None = None, **kw) -> None:
        super().__init__(**kw)
        if mlp_width is None:
            mlp_width = max(1, self.n_heads * self.head_dim // 4)
        require_positive_int("mlp_width", mlp_width)
        require_positive_int("depth", depth)
        if not isinstance(log_distance, bool):
            raise UserError(f"log_distance must be True or False, got {log_distance!r}")
        if max_distance is None:
            max_distance = DEFAULT_MAX_DISTANCE if self.max_len is None else \
                max(1, self.max_len - 1)
        require_positive_int("max_distance", max_distance)
        self.mlp_width, self.depth = mlp_width, depth
        self.log_distance, self.max_distance = log_distance, max_distance
        layers: list[nn.Module] = [nn.Linear(1, mlp_width), nn.SiLU()]
        for _ in range(depth - 1):
            layers += [nn.Linear(mlp_width, mlp_width), nn.SiLU()]
        self.mlp = nn.Sequential(*layers, nn.Linear(mlp_width, self.n_heads))

    def saturation(self) -> int:
        return self.max_distance

    def mlp_input(self, rel: Tensor) -> Tensor:
        """Distances k_pos - q_pos (N,) -> the MLP's coordinate (N,) fp32: i - j, clamped to
        +-max_distance, log-spaced with ``log_distance``."""
        d = (-rel).clamp(-self.max_distance, self.max_distance).to(torch.float32)
        return torch.sign(d) * torch.log1p(d.abs()) if self.log_distance else d

    def distance_bias(self, rel: Tensor) -> Tensor:
        """Bias for integer distances rel = k_pos - q_pos. rel (N,) -> (H, N) fp32."""
        x = self.mlp_input(rel)[:, None]                               # (N, 1)
        weight_dtype = self.mlp[0].weight.dtype
        return self.mlp(x.to(weight_dtype)).float().T                   # (H, N)

    def extra_repr(self) -> str:
        return (f"{super().extra_repr()}, mlp_width={self.mlp_width}, depth={self.depth}, "
                f"log_distance={self.log_distance}, max_distance={self.max_distance}")
