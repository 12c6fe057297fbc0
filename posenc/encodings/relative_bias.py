"""Shared mechanism for biases that depend only on the distance k_pos - q_pos.

A subclass gives ``bias_function() -> f(rel, head)``: the bias of head ``head`` at integer
distance ``rel``, elementwise over broadcast tensors, with any per-head parameters computed
once when the function is made; one whose bias stops changing past a distance M
(``saturation``) may give only ``distance_bias``, the table of its 2M + 1 distances, instead
(the dynamic bias's MLP). The same function fills the materialized (1, H, Lq, Lk) bias
(``score_bias``, one evaluation per pair and head) and runs inside a FlexAttention
``score_mod`` on one (pair, head) at a time, so long sequences never build the (H, n, n)
tensor. Distances come from the positions pair by pair: no table sized by the span of the
positions, so nothing waits for a position's value (no host synchronisation), and any
positions work. Translation invariance holds by construction.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from .base import PositionalEncoding, ScoreMod, pairs_per_head, position_reader
from .checks import check_direction, check_qk
from .context import HookContext

#: f(rel, head) -> bias: integer distances k_pos - q_pos and head indices, broadcast
BiasFunction = Callable[[Tensor, Tensor], Tensor]


def pair_distances(q_pos: Tensor, k_pos: Tensor) -> Tensor:
    """k_pos - q_pos for every (query, key) pair: (Lq,), (Lk,) -> (Lq, Lk); with positions
    per sequence (B, Lq) or (B, Lk) -> (B, Lq, Lk)."""
    return k_pos[..., None, :] - q_pos[..., :, None]



class DistanceBiasEncoding(PositionalEncoding):
    """Base for additive biases b_h(k_pos - q_pos) (ALiBi, T5, KERPLE)."""

    family = "bias"

    def bias_function(self) -> BiasFunction:
        """f(rel, head) -> fp32 bias of the broadcast shape of the integer tensors ``rel``
        (distances k_pos - q_pos) and ``head`` (head indices in [0, H))."""
        raise NotImplementedError

    def saturation(self) -> int | None:
        """A distance M past which the bias no longer changes (bias(rel) = bias(clamp(rel,
        -M, M))), or None. With it the materialized bias is read from a table of the 2M + 1
        distances (a gather, whose backward is cheap) instead of evaluated pair by pair."""
        return None

    def distance_bias(self, rel: Tensor) -> Tensor:
        """Bias for integer distances rel = k_pos - q_pos. rel (N,) -> (H, N)."""
        heads = torch.arange(self.n_heads, device=rel.device)
        return self.bias_function()(rel[None, :], heads[:, None])

    def score_bias(self, q: Tensor, k: Tensor, at: HookContext) -> Tensor:
        q_pos, k_pos, causal = at.q_pos, at.k_pos, at.causal
        check_qk(self, q, k, at, bias=True)
        check_direction(self, causal)
        rel = pairs_per_head(pair_distances(q_pos, k_pos))           # (1|B, 1, Lq, Lk)
        far = self.saturation()
        if far is None:
            heads = torch.arange(self.n_heads, device=rel.device)[:, None, None]
            return self.bias_function()(rel, heads)                  # (1|B, H, Lq, Lk)
        table = self.distance_bias(torch.arange(-far, far + 1, device=rel.device))  # (H, N)
        index = (rel.clamp(-far, far) + far).expand(-1, self.n_heads, -1, -1)
        table = table[None, :, None, :].expand(*index.shape[:3], table.shape[-1])
        return table.gather(-1, index)                               # (1|B, H, Lq, Lk)

    def score_mod(self, q: Tensor, k: Tensor, at: HookContext) -> ScoreMod:
        q_pos, k_pos, causal = at.q_pos, at.k_pos, at.causal
        check_qk(self, q, k, at, bias=True)
        check_direction(self, causal)
        q_at, k_at = position_reader(q_pos), position_reader(k_pos)
        far = self.saturation()
        if far is not None:                       # one lookup per score in a small table
            table = self.distance_bias(torch.arange(-far, far + 1, device=k_pos.device))
            table = table.to(q.dtype if q is not None else table.dtype)      # (H, 2M + 1)

            def add_table(score, b, h, q_idx, kv_idx):
                rel = (k_at(b, kv_idx) - q_at(b, q_idx)).clamp(-far, far) + far
                return score + table[h, rel].to(score.dtype)

            return add_table
        bias = self.bias_function()

        def add_bias(score, b, h, q_idx, kv_idx):
            return score + bias(k_at(b, kv_idx) - q_at(b, q_idx), h).to(score.dtype)

        return add_bias
