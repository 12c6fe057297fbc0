"""Transformer-XL relative attention (Dai et al., 2019), without the segment memory.

With R_{i-j} the sinusoidal vector (width C = H * D) of the unclipped distance between query
i and key j, a per-layer projection W_{K,R} (C -> H * D) and per-head vectors u, v:

    s_ij = [ q_i.k_j + q_i.(W_KR R_{i-j}) + u.k_j + v.(W_KR R_{i-j}) ] / sqrt(d)
         = [ (q_i + u).k_j + (W_KR^T (q_i + v)).R_{i-j} ] / sqrt(d)

How it is computed: R_{i-j} pairs sin((i-j)w_m) and cos((i-j)w_m), and the angle-difference
identities split each into products of functions of i and of j. So the position term is the
dot product of a query-side vector (W_KR^T (q_i + v), rotated by i w_m: RoPE, with the
rotary kernel) with the key-side vector [cos(j w_m), sin(j w_m)]. ``transform_qk`` appends
these C dimensions to every query and key head: plain dot products then give the exact
logits on every backend, no (Lq, Lk) table or bias is ever built, and nothing depends on
Lq == Lk. The price: q.k runs over D + C dims, and sdpa falls back to its math kernel since
the value width differs. Keys grow to D + C dims, so the KV cache keeps raw keys and
re-appends the key-side vectors (cache_transformed_keys = False). Angles are computed in
float64 so the split does not lose accuracy at large positions.

u, v and W_KR belong to each layer (per_layer), as in XLNet and Hugging Face's
``untie_r=True``. Negative distances (keys after the query) use the sinusoid at a negative
argument, so the same formula serves bidirectional encoders.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .base import PositionalEncoding, register, require_float_in
from .rotary_kernels import apply_rotary


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

    def cos_sin(self, pos: Tensor) -> tuple[Tensor, Tensor]:
        """cos and sin of pos * base^(-2m/C) with fp64 angles (whatever the module's dtype):
        (L, C/2) fp32 each."""
        width = self.n_heads * self.head_dim
        inv_freq = self.base ** (-torch.arange(0, width, 2, dtype=torch.float64,
                                               device=pos.device) / width)
        angles = pos.to(torch.float64)[:, None] * inv_freq[None, :]
        return angles.cos().float(), angles.sin().float()

    def transform_qk(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor
                     ) -> tuple[Tensor, Tensor]:
        h, d = q.shape[1], q.shape[3]
        # a = W_KR^T (q + v) pairs (a_sin, a_cos) with R's (sin, cos). The pair (a_cos, -a_sin)
        # rotated by i w, dotted with (cos jw, sin jw), is a_sin sin((i-j)w) + a_cos cos((i-j)w):
        # fold the swap and sign into the weight, then rotate like RoPE.
        w = self.pos_proj.weight.view(h, d, -1, 2)                    # (H, D, C/2, 2)
        w = torch.stack((w[..., 1], -w[..., 0]), dim=-1).flatten(-2)  # (H, D, C)
        a = torch.einsum("bhld,hdc->bhlc", q + self.v[:, None].to(q.dtype), w.to(q.dtype))
        q_rel = apply_rotary(a, *self.cos_sin(q_pos), layout="interleaved")  # (B, H, Lq, C)
        k_rel = torch.stack(self.cos_sin(k_pos), dim=-1).flatten(-2).to(k.dtype)  # (Lk, C)
        q_out = torch.cat((q + self.u[:, None].to(q.dtype), q_rel), dim=-1)
        k_out = torch.cat((k, k_rel.expand(k.shape[0], h, -1, -1)), dim=-1)
        return q_out, k_out                                           # (B, H, L, D + C)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, base={self.base}"
