"""Transformer-XL relative attention (Dai et al., 2019), without the segment memory.

With R_{i-j} the sinusoidal vector (width C = H * D) of the unclipped distance between query
i and key j, a per-layer projection W_{K,R} (C -> H * D) and per-head vectors u, v:

    s_ij = [ q_i.k_j + q_i.(W_KR R_{i-j}) + u.k_j + v.(W_KR R_{i-j}) ] / sqrt(d)
         = [ (q_i + u).k_j + (q_i + v).(W_KR R_{i-j}) ] / sqrt(d)

Two exact ways to compute the position term, chosen by ``position_term``:

- ``"table"`` (the paper's): project R over the distances that occur, multiply by q + v into
  a (B, H, Lq, N) table and read it per pair with the relative shift
  (kernels/layouts/relative_shift.py; N = L for causal training). ``transform_qk`` only
  adds u. q.k stays D wide and the table costs about one more q.k product, but the table
  grows like Lq * Lk. The term is declared once (``relative_term``, an unbounded
  query-side :class:`~posenc.encodings.relative_term.RelativeTerm`), which derives the
  strided, gathered and score_mod forms.
- ``"rotary"``: R_{i-j} pairs sin((i-j)w_m) and cos((i-j)w_m), and the angle-difference
  identities split each into products of functions of i and of j. So the term is the dot
  product of a query-side vector (W_KR^T (q_i + v), rotated by i w_m: RoPE, with the rotary
  kernel) with the key-side vector [cos(j w_m), sin(j w_m)]. ``transform_qk`` appends these
  C dimensions to every query and key head: plain dot products give the exact logits on
  every backend, nothing of size Lq * Lk is built besides the scores (FlexAttention never
  builds those), at the price of q.k running over D + C dims.
- ``"auto"`` (default): the table when the positions are consecutive runs (training,
  prefill, cached decoding) and attention does not run FlexAttention; rotary otherwise (long
  evaluation on flex, padded or packed positions), so no table is sized from position values.

Keys are cached raw (cache_transformed_keys = False) since the rotary form appends key-side
vectors. Angles are computed in float64 so neither form loses accuracy at large positions.

u, v and W_KR belong to each layer (per_layer), as in XLNet and Hugging Face's
``untie_r=True``. Negative distances (keys after the query) use the sinusoid at a negative
argument, so the same formula serves bidirectional encoders.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ..errors import UserError
from ..kernels.rotary import apply_rotary
from .base import PositionalEncoding, ScoreMod, register
from .checks import require_choice, require_float_in
from .context import HookContext
from .relative_term import RelativeTerm, relative_bias, relative_score_mod

POSITION_TERMS = ("auto", "table", "rotary")


@register("xl")
class TransformerXLEncoding(PositionalEncoding):
    """Content and position terms with global biases u, v; no value term.

    Options: ``base`` of the sinusoid (10000), ``init_std`` of u, v and W_KR (0.02),
    ``position_term``: how the position term is computed, "auto", "table" or "rotary"
    (module docstring; all exact).
    """

    family = "relative"
    extrapolates = "partly (unclipped sinusoidal distances; unseen ones are new inputs)"
    distance_only = True
    cache_note = "exact (raw keys cached; u or the rotary position dims re-applied)"
    cache_transformed_keys = False
    per_layer = True

    def __init__(self, *, base: float = 10000.0, init_std: float = 0.02,
                 position_term: str = "auto", **kw) -> None:
        super().__init__(**kw)
        self.position_term = require_choice("position_term", position_term, POSITION_TERMS)
        self.base = require_float_in("base", base, 1.0, float("inf"))
        require_float_in("init_std", init_std, 0.0, float("inf"))
        width = self.n_heads * self.head_dim
        if width % 2:
            raise UserError(f"xl needs an even n_heads * head_dim (the sinusoid width), got "
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
        angles = pos.to(torch.float64)[..., None] * inv_freq
        return angles.cos().float(), angles.sin().float()

    def rotary(self, backend: str | None, consecutive: bool) -> bool:
        """Whether a call uses the rotary form (module docstring), decided in
        ``transform_qk``; the bias hooks see it in the width of q (D + C)."""
        if self.position_term != "auto":
            return self.position_term == "rotary"
        return backend == "flex" or not consecutive

    def transform_qk(self, q: Tensor, k: Tensor, at: HookContext) -> tuple[Tensor, Tensor]:
        q_pos, k_pos = at.q_pos, at.k_pos
        if not self.rotary(at.backend, at.consecutive):
            return q + self.u[:, None].to(q.dtype), k
        h, d = q.shape[1], q.shape[3]
        # a = W_KR^T (q + v) pairs (a_sin, a_cos) with R's (sin, cos). The pair (a_cos, -a_sin)
        # rotated by i w, dotted with (cos jw, sin jw), is a_sin sin((i-j)w) + a_cos cos((i-j)w):
        # fold the swap and sign into the weight, then rotate like RoPE.
        w = self.pos_proj.weight.view(h, d, -1, 2)                    # (H, D, C/2, 2)
        w = torch.stack((w[..., 1], -w[..., 0]), dim=-1).flatten(-2)  # (H, D, C)
        a = torch.einsum("bhld,hdc->bhlc", q + self.v[:, None].to(q.dtype), w.to(q.dtype))
        q_rel = apply_rotary(a, *self.cos_sin(q_pos), layout="interleaved")  # (B, H, Lq, C)
        k_rel = torch.stack(self.cos_sin(k_pos), dim=-1).flatten(-2).to(k.dtype)  # ([B,] Lk, C)
        k_rel = k_rel if k_rel.dim() == 2 else k_rel[:, None]          # per sequence
        q_out = torch.cat((q + self.u[:, None].to(q.dtype), q_rel), dim=-1)
        k_out = torch.cat((k, k_rel.expand(k.shape[0], h, k.shape[2], -1)), dim=-1)
        return q_out, k_out                                           # (B, H, L, D + C)

    def relative_term(self, q: Tensor, q_scale: Tensor | None) -> RelativeTerm:
        """The position term (q + v).(W_KR R_d) * sm_scale, declared over unclipped
        distances d (query side): q (B, H, Lq, D) as attention passes it (u added, then
        times ``q_scale`` (Lq,), log-n, if any)."""
        shift = (self.v - self.u)[:, None].to(q.dtype)                # (H, 1, D)
        if q_scale is not None:                                       # log-n scales q + v
            shift = shift * q_scale.to(q.dtype)[:, None]              # (H, Lq, D)

        def heads(distances: Tensor) -> Tensor:                      # (H, N, D)
            cos, sin = self.cos_sin(distances)
            r = torch.stack((sin, cos), dim=-1).flatten(-2)           # (N, C): R_d
            out = self.pos_proj(r.to(self.pos_proj.weight.dtype)) * self.sm_scale()
            return out.to(q.dtype).view(-1, self.n_heads, self.head_dim).transpose(0, 1)

        return RelativeTerm.unbounded("query", q + shift, heads)

    def score_bias(self, q: Tensor, k: Tensor, at: HookContext) -> Tensor | None:
        if q.shape[-1] != self.head_dim:                  # the rotary form is in q and k
            return None
        return relative_bias([self.relative_term(q, self.attn_scale(at))], at)

    def score_mod(self, q: Tensor, k: Tensor, at: HookContext) -> ScoreMod | None:
        if q.shape[-1] != self.head_dim:                  # the rotary form is in q and k
            return None
        term = self.relative_term(q, self.attn_scale(at))
        return relative_score_mod([term], at.q_pos, at.k_pos)

    def extra_repr(self) -> str:
        return (f"{super().extra_repr()}, base={self.base}, "
                f"position_term={self.position_term!r}")
