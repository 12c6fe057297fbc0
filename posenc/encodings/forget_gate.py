"""Forget gate: data-dependent ALiBi of the Forgetting Transformer (Lin et al., 2025).

Lin, Nikishin, He and Courville, "Forgetting Transformer: Softmax Attention with a Forget
Gate", ICLR 2025, Section 2 (Forgetting Attention). Each head h reads a scalar forget gate
from every token's attention input x_t (B, T, C):

    f_t = sigmoid(w_h . x_t + b_h),       bias(i, j) = sum_{l=j+1..i} log f_l     (j <= i)

and adds bias(i, j) to the logits: the weight of key j decays by the product of the gates
of the tokens after it. With log-gates' running sum c_t = sum_{l<=t} log f_l the bias is
c_i - c_j, so the hooks only need c at the queries and at the keys: the FlexAttention
score_mod reads two (B, H, L) tables and never builds the (H, n, n) bias.

The bidirectional form (x-transformers' ``DataDependentAlibi(causal=False)``, for encoders)
reads a second gate g_t per head for the keys after the query: bias(i, j) = sum_{l=i+1..j}
log g_l for j > i.

The gates come from the attention's input, not from q or k: the encoding's ``token_terms``
hook returns log f_t (B, H, T, 1) (and log g_t), self-attention keeps them with the KV cache
and hands those of every key to the bias hooks as ``at.key_terms``; the running sums are
taken over the keys in order (cached keys first, the queries are the last Lq keys), so
cached decoding equals a full forward. Positions are never read: tokens at the edges of a
row (left or right padding) lie outside every sum between two real tokens. The gate bias
starts at ``bias_init`` = 5 (f = 0.993, little forgetting at first), as x-transformers does.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..errors import UserError
from .base import PositionalEncoding, ScoreMod, register
from .checks import check_direction, check_qk, require_float_in
from .context import HookContext


@register("forget_gate")
class ForgetGateEncoding(PositionalEncoding):
    """Per-head forget gates read from the attention input; bias = summed log-gates between
    key and query (causal), or a second gate set for later keys (``bidirectional``).

    Options: ``bidirectional`` (False), ``bias_init`` (5.0: initial gate bias).
    """

    family = "bias"
    extrapolates = "yes (learned, data-dependent decay)"
    cache_note = "exact (keeps each cached token's log-gates)"
    per_layer = True
    position_free = True

    def __init__(self, *, bidirectional: bool = False, bias_init: float = 5.0, **kw) -> None:
        super().__init__(**kw)
        if not isinstance(bidirectional, bool):
            raise UserError(f"bidirectional must be True or False, got {bidirectional!r}")
        self.bidirectional = bidirectional
        self.bias_init = require_float_in("bias_init", bias_init, -30.0, 30.0, False, False)
        d_model = self.n_heads * self.head_dim
        self.gate_proj = nn.Linear(d_model, self.n_heads)             # f: keys up to i
        nn.init.constant_(self.gate_proj.bias, self.bias_init)
        if bidirectional:                                              # g: keys after i
            self.later_gate_proj = nn.Linear(d_model, self.n_heads)
            nn.init.constant_(self.later_gate_proj.bias, self.bias_init)

    def token_terms(self, x: Tensor) -> Tensor:
        """x (B, T, C) -> log-gates (B, H, T, K) fp32: K = 1 (log f), or 2 (log f, log g)
        when bidirectional."""
        if x.dim() != 3 or x.shape[-1] != self.gate_proj.in_features:
            raise UserError(f"forget_gate reads the attention input x (batch, length, "
                            f"{self.gate_proj.in_features}), got shape {tuple(x.shape)}")
        projections = [self.gate_proj] + ([self.later_gate_proj] if self.bidirectional else [])
        logits = torch.stack([proj(x) for proj in projections], dim=-1).float()  # (B, T, H, K)
        return F.logsigmoid(logits).transpose(1, 2)                           # (B, H, T, K)

    def running_sums(self, at: HookContext, q: Tensor | None, k: Tensor | None
                     ) -> tuple[Tensor, Tensor]:
        """The running sums of the log-gates at the keys (B, H, Lk, K) and at the queries
        (B, H, Lq, K) (the last Lq keys); UserError without ``at.key_terms``."""
        check_qk(self, q, k, at, bias=True)
        terms = at.key_terms
        if terms is None:
            raise UserError("forget_gate reads the attention's input: its hooks need "
                            "at.key_terms (its token_terms of every key), which "
                            "self-attention fills; cross-attention has none")
        lq, lk = at.q_pos.shape[-1], at.k_pos.shape[-1]
        if terms.dim() != 4 or terms.shape[1] != self.n_heads or terms.shape[2] != lk or \
                terms.shape[3] != (2 if self.bidirectional else 1) or lq > lk:
            raise UserError(f"at.key_terms must be (batch, {self.n_heads}, {lk}, "
                            f"{2 if self.bidirectional else 1}) for {lq} queries among the "
                            f"keys, got shape {tuple(terms.shape)}")
        check_direction(self, at.causal)
        keys = terms.float().cumsum(dim=2)                     # (B, H, Lk, K)
        return keys, keys[:, :, lk - lq:]

    def score_bias(self, q: Tensor, k: Tensor, at: HookContext) -> Tensor:
        keys, queries = self.running_sums(at, q, k)
        bias = queries[:, :, :, None, 0] - keys[:, :, None, :, 0]       # (B, H, Lq, Lk)
        if not self.bidirectional:
            return bias
        later = keys[:, :, None, :, 1] - queries[:, :, :, None, 1]      # keys after i
        lq, lk = queries.shape[2], keys.shape[2]
        after = torch.ones(lq, lk, dtype=torch.bool, device=bias.device).triu(lk - lq + 1)
        return torch.where(after, later, bias)

    def score_mod(self, q: Tensor, k: Tensor, at: HookContext) -> ScoreMod:
        keys, queries = self.running_sums(at, q, k)
        offset = keys.shape[2] - queries.shape[2]               # query i is key i + offset
        keys, queries = keys.contiguous(), queries.contiguous()
        if not self.bidirectional:
            def add_decay(score, b, h, q_idx, kv_idx):
                decay = queries[b, h, q_idx, 0] - keys[b, h, kv_idx, 0]
                return score + decay.to(score.dtype)

            return add_decay

        def add_both(score, b, h, q_idx, kv_idx):
            before = queries[b, h, q_idx, 0] - keys[b, h, kv_idx, 0]
            later = keys[b, h, kv_idx, 1] - queries[b, h, q_idx, 1]
            decay = torch.where(kv_idx > q_idx + offset, later, before)
            return score + decay.to(score.dtype)

        return add_both

    def extra_repr(self) -> str:
        return (f"{super().extra_repr()}, bidirectional={self.bidirectional}, "
                f"bias_init={self.bias_init}")
