"""PaTH and PaTH-FoX: data-dependent multiplicative position encoding by accumulated
Householder-like transforms (Yang et al., 2025).

Yang, Shen, Wen, Tan, Mishra, Ren, Panda and Kim, "PaTH Attention: Position Encoding via
Accumulating Householder Transformations", NeurIPS 2025 (arXiv 2505.16381), Section 3. Every
token t reads from its attention input x_t, per head,

    w_t = normalize(W_w x_t),   beta_t = 2 sigmoid(b_beta . x_t + c)     (in (0, 2))

and the logit of query i and key j <= i is q_i^T H_i ... H_{j+1} k_j / sqrt(D) with
H_t = I - beta_t w_t w_t^T (beta > 1 gives negative eigenvalues, Section 3): the
transform between two tokens is a product of what the tokens between them wrote, not a
function of their distance. PaTH-FoX (Section 3) adds the forget gate of Lin et al.
(ICLR 2025): log f_t = logsigmoid(g_h . x_t + b_h), summed over the tokens j < t <= i. As
fla's PaTH layer (the anchor), the summed log-gates join the logit before the 1/sqrt(D)
scale (posenc's ``forget_gate``, as fla's FoX, adds them after).

Projections follow fla's ``PaTHAttention`` (flash-linear-attention 0.6): W_w low rank
(d_model -> ``w_rank`` -> H * D, no bias; ``w_rank=None``: one full projection), beta and
the gate one bias-carrying linear each. fla's default short convolution on w (kernel 3,
reading the two tokens before) is left out: the terms of a token then depend on that token
only, which is what attention keeps with the KV cache (fla's ``use_w_shortconv=False``).

How it meets the hooks: ``token_terms`` returns [w, beta(, log f)] per head (B, H, T, D + 1
(+ 1)); the whole logit is the ``score_bias`` term (``sm_scale`` is 0: the plain q . k
enters with weight 0), computed blockwise (:mod:`.householder_products`, ``chunk_size``
tokens a chunk); ``carry_keys`` gives the KV cache its keys carried past the call's tokens,
so a query meets cached keys after crossing the new tokens only (decode: one rank-one
update per cached key and token). Positions are never read: the keys' order is the context.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..errors import UserError
from .base import PositionalEncoding, register
from .checks import check_direction, check_qk, require_float_in, require_positive_int
from .context import HookContext
from .householder_products import carry_keys, path_logits


@register("path")
class PaTHEncoding(PositionalEncoding):
    """Accumulated data-dependent Householder transforms between key and query (causal).

    Options: ``chunk_size`` (64: tokens a block of the blockwise form), ``w_rank`` (32: the
    low-rank width of w's projection, as fla; None: a full projection), ``bidirectional``
    (False; True for encoders: a key after the query meets it through the same path read
    backwards, q_i^T H_{i+1} ... H_j k_j, and PaTH-FoX's gates summed over the same tokens,
    an extension the paper does not define).
    """

    family = "rotary"             # multiplicative: a transform between q and k, as RoPE's
    extrapolates = "yes (data-dependent transforms, no position read)"
    cache_note = "exact (keeps keys carried past later tokens' transforms)"
    per_layer = True
    position_free = True
    #: reads a forget gate too (PaTH-FoX)
    forget_gate: bool = False

    def __init__(self, *, chunk_size: int = 64, w_rank: int | None = 32,
                 bidirectional: bool = False, **kw) -> None:
        super().__init__(**kw)
        if not isinstance(bidirectional, bool):
            raise UserError(f"bidirectional must be True or False, got {bidirectional!r}")
        self.bidirectional = bidirectional
        require_positive_int("chunk_size", chunk_size)
        if w_rank is not None:
            require_positive_int("w_rank", w_rank)
        self.chunk_size, self.w_rank = chunk_size, w_rank
        d_model = self.n_heads * self.head_dim
        self.w_proj = nn.Linear(d_model, d_model, bias=False) if w_rank is None else \
            nn.Sequential(nn.Linear(d_model, w_rank, bias=False),
                          nn.Linear(w_rank, d_model, bias=False))
        self.beta_proj = nn.Linear(d_model, self.n_heads)

    def sm_scale(self) -> float:
        """0: the whole logit is the ``score_bias`` term (q . k enters with weight 0)."""
        return 0.0

    def token_terms(self, x: Tensor) -> Tensor:
        """x (B, T, C) -> (B, H, T, D + 1) fp32: the unit vector w_t and beta_t in (0, 2)
        per head; PaTH-FoX appends log f_t (D + 2)."""
        d_model = self.n_heads * self.head_dim
        if x.dim() != 3 or x.shape[-1] != d_model:
            raise UserError(f"{self.name} reads the attention input x (batch, length, "
                            f"{d_model}), got shape {tuple(x.shape)}")
        w = self.w_proj(x).float().unflatten(-1, (self.n_heads, self.head_dim))  # (B, T, H, D)
        w = w * torch.rsqrt((w * w).sum(-1, keepdim=True) + 1e-6)      # fla's l2_norm
        terms = [w, 2.0 * torch.sigmoid(self.beta_proj(x).float())[..., None]]
        if self.forget_gate:
            terms.append(F.logsigmoid(self.gate_proj(x).float())[..., None])
        return torch.cat(terms, dim=-1).transpose(1, 2)                # (B, H, T, K)

    def _terms(self, k: Tensor, at: HookContext) -> Tensor:
        """at.key_terms (B, H, Lk, K), checked; UserError without them, or without a causal
        mask unless ``bidirectional``."""
        terms = at.key_terms
        if terms is None:
            raise UserError(f"{self.name} reads the attention's input: its hooks need "
                            "at.key_terms (its token_terms of every key), which "
                            "self-attention fills; cross-attention has none")
        width = self.head_dim + (2 if self.forget_gate else 1)
        lq, lk = at.q_pos.shape[-1], at.k_pos.shape[-1]
        if terms.dim() != 4 or terms.shape[1] != self.n_heads or terms.shape[2] != lk or \
                terms.shape[3] != width or lq > lk:
            raise UserError(f"at.key_terms must be (batch, {self.n_heads}, {lk}, {width}) for "
                            f"{lq} queries among the keys, got shape {tuple(terms.shape)}")
        check_direction(self, at.causal)
        return terms

    def score_bias(self, q: Tensor, k: Tensor, at: HookContext) -> Tensor:
        """The whole logit q_i^T H_i ... H_{j+1} k_j / sqrt(D) (+ the summed log-gates
        before the scale): (B, H, Lq, Lk) fp32, zero at hidden pairs. The queries are the
        last Lq keys; with ``at.carried_keys`` the keys before them (a KV cache's) come
        carried past every earlier token (``carry_keys``)."""
        check_qk(self, q, k, at, bias=True)
        terms = self._terms(k, at)
        lq, lk = q.shape[2], k.shape[2]
        new = terms[:, :, lk - lq:].float()
        w, beta = new[..., :self.head_dim], new[..., self.head_dim]
        prefix = self._carried_prefix(k, terms, lq, at)
        block, before = path_logits(q, k[:, :, lk - lq:], w, beta, prefix, self.chunk_size)
        logits = block if before is None else torch.cat([before, block], dim=-1)
        later = torch.ones(lq, lk, dtype=torch.bool, device=q.device).triu(lk - lq + 1)
        if not at.causal:                        # keys after the query: the mirrored path
            after = self._later_logits(q, k[:, :, lk - lq:], w, beta)   # (B, H, Lq, Lq)
            logits = torch.where(later, F.pad(after, (lk - lq, 0)), logits)
        if self.forget_gate:
            sums = terms[..., -1].float().cumsum(-1)                   # (B, H, Lk)
            decay = sums[:, :, lk - lq:, None] - sums[:, :, None, :]
            logits = logits + torch.where(later, 0.0 if at.causal else -decay, decay)
        return logits * (1.0 / math.sqrt(self.head_dim))

    def _carried_prefix(self, k: Tensor, terms: Tensor, lq: int, at: HookContext
                        ) -> Tensor | None:
        """The keys before the queries (B, H, Lk - Lq, D) carried past every token before
        the queries (as given when ``at.carried_keys``), or None when there are none."""
        lk = k.shape[2]
        if lk == lq:
            return None
        if at.carried_keys:
            return k[:, :, :lk - lq]
        earlier = terms[:, :, :lk - lq].float()
        return carry_keys(k[:, :, :lk - lq], earlier[..., :self.head_dim],
                          earlier[..., self.head_dim], None, self.chunk_size)

    def _later_logits(self, q: Tensor, k: Tensor, w: Tensor, beta: Tensor) -> Tensor:
        """s_ij = q_i^T H_{i+1} ... H_j k_j for keys after the query (B, H, L, L) (valid
        above the diagonal): the causal form over the reversed sequence, each token applying
        the factor of the one after it."""
        flip = [t.flip(2) for t in (q, k, w, beta)]
        w_next = torch.nn.functional.pad(flip[2][:, :, :-1], (0, 0, 1, 0))   # token t+1's
        beta_next = torch.nn.functional.pad(flip[3][:, :, :-1], (1, 0))
        scores, _ = path_logits(flip[0], flip[1], w_next, beta_next, None, self.chunk_size)
        return scores.flip(2, 3)

    def carry_keys(self, k: Tensor, at: HookContext) -> Tensor:
        """The keys (B, H, Lk, D) carried past this call's Lq tokens (the last Lq keys):
        what the KV cache keeps for the next call."""
        terms = self._terms(k, at)
        lq, lk = at.q_pos.shape[-1], k.shape[2]
        new = terms[:, :, lk - lq:].float()
        prefix = self._carried_prefix(k, terms, lq, at)
        carried = carry_keys(k[:, :, lk - lq:], new[..., :self.head_dim],
                             new[..., self.head_dim], prefix, self.chunk_size)
        return carried.to(k.dtype)

    def extra_repr(self) -> str:
        return (f"{super().extra_repr()}, chunk_size={self.chunk_size}, w_rank={self.w_rank}, "
                f"bidirectional={self.bidirectional}")


@register("path_fox")
class PaTHFoXEncoding(PaTHEncoding):
    """PaTH with the Forgetting Transformer's forget gate (PaTH-FoX).

    Options: those of ``path`` and ``gate_bias_init`` (5.0: the gate's initial bias, f =
    0.993, as posenc's ``forget_gate``).
    """

    extrapolates = "yes (data-dependent transforms and decay, no position read)"
    cache_note = "exact (keeps carried keys and each token's log-gate)"
    forget_gate = True

    def __init__(self, *, gate_bias_init: float = 5.0, **kw) -> None:
        super().__init__(**kw)
        self.gate_bias_init = require_float_in("gate_bias_init", gate_bias_init, -30.0, 30.0,
                                               False, False)
        self.gate_proj = nn.Linear(self.n_heads * self.head_dim, self.n_heads)
        nn.init.constant_(self.gate_proj.bias, self.gate_bias_init)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, gate_bias_init={self.gate_bias_init}"
