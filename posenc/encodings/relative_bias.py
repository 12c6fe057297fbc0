"""Shared mechanism for biases that depend only on the distance k_pos - q_pos.

A subclass gives ``distance_bias(rel) -> (H, N)`` for a 1-D tensor of integer distances. The
bias is evaluated once per distinct distance (Lq + Lk - 1 values), then gathered: into an
(H, Lq, Lk) tensor for ``score_bias``, or inside a FlexAttention ``score_mod`` so long
sequences never build the (H, n, n) tensor. Translation invariance holds by construction.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .base import PositionalEncoding, ScoreMod, check_qk


class DistanceBiasEncoding(PositionalEncoding):
    """Base for additive biases b_h(k_pos - q_pos) (ALiBi, T5, KERPLE, FIRE)."""

    family = "bias"

    def distance_bias(self, rel: Tensor) -> Tensor:
        """Bias for integer distances rel = k_pos - q_pos. rel (N,) -> (H, N)."""
        raise NotImplementedError

    def distance_table(self, q_pos: Tensor, k_pos: Tensor) -> tuple[Tensor, int]:
        """Bias for every distance between the two position sets: (H, N) and the offset
        ``lo`` such that distance r sits at column r - lo."""
        lo = int(k_pos.min()) - int(q_pos.max())
        hi = int(k_pos.max()) - int(q_pos.min())
        rel = torch.arange(lo, hi + 1, device=k_pos.device)
        return self.distance_bias(rel), lo

    def score_bias(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor,
                   causal: bool = False) -> Tensor:
        check_qk(self, q, k, q_pos, k_pos, bias=True)
        table, lo = self.distance_table(q_pos, k_pos)                # (H, N)
        index = k_pos[None, :] - q_pos[:, None] - lo                 # (Lq, Lk)
        return table[:, index].unsqueeze(0)                          # (1, H, Lq, Lk)

    def score_mod(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor,
                  causal: bool = False) -> ScoreMod:
        check_qk(self, q, k, q_pos, k_pos, bias=True)
        table, lo = self.distance_table(q_pos, k_pos)                # (H, N)
        table = table.to(q.dtype)
        q_off, k_off = q_pos + lo, k_pos                             # column = k - (q + lo)

        def add_bias(score, b, h, q_idx, kv_idx):
            return score + table[h, k_off[kv_idx] - q_off[q_idx]]

        return add_bias
