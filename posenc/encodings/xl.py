"""Transformer-XL relative attention (Dai et al., 2019), without the segment memory.

With R_{i-j} the sinusoidal vector (width C = H * D) of the unclipped distance between query
i and key j, a per-layer projection W_{K,R} (C -> H * D) and per-head vectors u, v:

    s_ij = [ q_i.k_j + q_i.(W_KR R_{i-j}) + u.k_j + v.(W_KR R_{i-j}) ] / sqrt(d)
         = [ (q_i + u).k_j + (W_KR^T (q_i + v)).R_{i-j} ] / sqrt(d)

How it is computed: R_{i-j} pairs sin((i-j)w_m) and cos((i-j)w_m), and the angle-difference
identities split each into products of functions of i and of j. So the position term is the
dot product of a query-side vector (W_KR^T (q_i + v), rotated by i w_m) with the key-side
vector [cos(j w_m), sin(j w_m)]. ``transform_qk`` appends these C dimensions to every query
and key head: plain dot products then give the exact logits on every backend, no (Lq, Lk)
table or bias is ever built, and nothing depends on Lq == Lk. Keys grow to D + C dims, so the
KV cache keeps raw keys and re-appends the key-side vectors (cache_transformed_keys = False).
Angles are computed in float64 so the split does not lose accuracy at large positions.

u, v and W_KR belong to each layer (per_layer), as in XLNet and Hugging Face's
``untie_r=True``. Negative distances (keys after the query) use the sinusoid at a negative
argument, so the same formula serves bidirectional encoders.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .base import PositionalEncoding, register, require_float_in


@register("xl")
class TransformerXLEncoding(PositionalEncoding):
    """Content and position terms with global biases u, v; no value term.

    Options: ``base`` of the sinusoid (10000), ``init_std`` of u, v and W_KR (0.02).
    """

    family = "relative"
    extrapolates = "partly (unclipped sinusoidal distances; unseen ones are new inputs)"
    cache_note = "exact (raw keys cached; position dims re-appended)"
    cache_transformed_keys = False
    per_layer = True

    def __init__(self, *, base: float = 10000.0, init_std: float = 0.02, **kw) -> None:
        super().__init__(**kw)
        self.base = require_float_in("base", base, 1.0, float("inf"))
        require_float_in("init_std", init_std, 0.0, float("inf"))
        width = self.n_heads * self.head_dim
        if width % 2:
            raise ValueError(f"xl needs an even n_heads * head_dim (the sinusoid width), got "
                             f"{width}")
        self.pos_proj = nn.Linear(width, width, bias=False)           # W_{K,R}
        nn.init.normal_(self.pos_proj.weight, std=init_std)
        self.u = nn.Parameter(torch.randn(self.n_heads, self.head_dim) * init_std)
        self.v = nn.Parameter(torch.randn(self.n_heads, self.head_dim) * init_std)
        inv_freq = base ** (-torch.arange(0, width, 2, dtype=torch.float64) / width)
        self.register_buffer("inv_freq", inv_freq, persistent=False)  # (C/2,) fp64

    def cos_sin(self, pos: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        """cos and sin of pos * inv_freq, angles in fp64: (L, C/2) each, in ``dtype``."""
        angles = pos.to(torch.float64)[:, None] * self.inv_freq[None, :]
        return angles.cos().to(dtype), angles.sin().to(dtype)

    def relative_vectors(self, distance: Tensor) -> Tensor:
        """R_d for integer distances d (N,): (N, C), sin/cos interleaved like the sinusoidal
        encoding; the reference the fast path is tested against."""
        cos, sin = self.cos_sin(distance, torch.float32)
        return torch.stack((sin, cos), dim=-1).flatten(-2)            # (N, C)

    def transform_qk(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor
                     ) -> tuple[Tensor, Tensor]:
        b, h, lq, d = q.shape
        w = self.pos_proj.weight.view(h, d, -1)                       # (H, D, C)
        a = torch.einsum("bhld,hdc->bhlc", (q + self.v[:, None]).float(), w.float())
        a_sin, a_cos = a.unflatten(-1, (-1, 2)).unbind(-1)            # (B, H, Lq, C/2) each
        cos_i, sin_i = self.cos_sin(q_pos, torch.float32)             # (Lq, C/2)
        # a_sin sin((i-j)w) + a_cos cos((i-j)w) = x_i cos(jw) + y_i sin(jw)
        x = a_sin * sin_i + a_cos * cos_i
        y = a_cos * sin_i - a_sin * cos_i
        q_pos_dims = torch.stack((x, y), dim=-1).flatten(-2)          # (B, H, Lq, C)
        cos_j, sin_j = self.cos_sin(k_pos, k.dtype)                   # (Lk, C/2)
        k_pos_dims = torch.stack((cos_j, sin_j), dim=-1).flatten(-2)  # (Lk, C)
        q_out = torch.cat((q + self.u[:, None].to(q.dtype), q_pos_dims.to(q.dtype)), dim=-1)
        k_out = torch.cat((k, k_pos_dims.expand(k.shape[0], h, -1, -1)), dim=-1)
        return q_out, k_out                                           # (B, H, L, D + C)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, base={self.base}"
