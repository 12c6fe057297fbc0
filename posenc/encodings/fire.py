"""FIRE: functional interpolation for relative positions (Li et al., 2023).

The bias of query position i for key position j is a small MLP of a log-transformed,
length-normalised distance:

    b(i, j) = f(psi(i - j) / psi(max(L, i))),     psi(x) = log(|c x| + 1),

with f: R -> R^H (one hidden ReLU layer, width ``mlp_width`` = 32), a learned log scale c and
a learned threshold L = |l * L0| (``init_L`` = L0, learned multiplier l initialised to 1).
Dividing by psi(max(L, i)) maps every distance a query can see into [0, 1], so a longer
sequence interpolates inside the trained range instead of extrapolating past it. This
follows the paper's reference code: |i - j| (future keys, hidden by a causal mask, get the
symmetric value) and an ``eps`` added to the normaliser.

The bias depends on the query position i as well as on i - j, so it is not a
``DistanceBiasEncoding``. ``score_bias`` evaluates the MLP on an (Lq, Lk) grid (its hidden
layer is an (Lq, Lk, mlp_width) fp32 tensor: 128 MiB at 1024 tokens, so long evaluation
should go through flex, which ``auto`` picks from 2048 keys without gradients). For positions
per sequence (padded or packed batches) on the CPU it evaluates the MLP once per distinct
(query position, key position) in the positions' ranges and gathers each sequence's bias from
that table, instead of once per (sequence, query, key). The flex
``score_mod`` is exact without any (H, n, n) tensor: it computes the normalised distance of
the one (i, j) pair it is given and evaluates the MLP there as ``mlp_width`` unrolled scalar
terms, b2[h] + sum_u w2[h, u] * relu(w1[u] x + b1[u]); only the per-query normaliser (Lq,) is
precomputed. (FlexAttention's score_mod allows no reductions, hence the unrolling; its
compile time grows with ``mlp_width``.) Each layer has its own FIRE module, as in the
reference code.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from .base import PositionalEncoding, ScoreMod, position_reader, register
from .checks import require_float_in, require_positive_int
from .context import HookContext


@register("fire")
class FireEncoding(PositionalEncoding):
    """Learned MLP of the progressively interpolated log distance, per head.

    Options: ``mlp_width`` (32), ``init_c`` (0.1, > 0), ``init_L`` (512, > 0), ``eps``
    (1e-6, > 0).
    """

    family = "bias"
    extrapolates = "yes (distances normalised by the query position)"
    per_layer = True

    def __init__(self, *, mlp_width: int = 32, init_c: float = 0.1, init_L: float = 512.0,
                 eps: float = 1e-6, **kw) -> None:
        super().__init__(**kw)
        require_positive_int("mlp_width", mlp_width)
        self.init_c = require_float_in("init_c", init_c, 0.0, float("inf"))
        self.init_L = require_float_in("init_L", init_L, 0.0, float("inf"))
        self.eps = require_float_in("eps", eps, 0.0, float("inf"))
        self.mlp_width = mlp_width
        # raw Parameters (a model's blanket nn.Linear init must not redo them); nn.Linear's
        # default init: uniform(-1/sqrt(fan_in), 1/sqrt(fan_in))
        bound2 = 1.0 / math.sqrt(mlp_width)
        self.w1 = nn.Parameter(torch.empty(mlp_width).uniform_(-1.0, 1.0))       # fan_in 1
        self.b1 = nn.Parameter(torch.empty(mlp_width).uniform_(-1.0, 1.0))
        self.w2 = nn.Parameter(torch.empty(self.n_heads, mlp_width).uniform_(-bound2, bound2))
        self.b2 = nn.Parameter(torch.empty(self.n_heads).uniform_(-bound2, bound2))
        self.c = nn.Parameter(torch.tensor(float(init_c)))
        self.L_multiplier = nn.Parameter(torch.tensor(1.0))

    def inverse_normaliser(self, q_pos: Tensor) -> Tensor:
        """1 / (psi(max(L, i)) + eps) per query: (Lq,) or (B, Lq) fp32."""
        threshold = (self.L_multiplier * self.init_L).abs()
        norm = torch.maximum(q_pos.to(torch.float32), threshold)
        return 1.0 / (torch.log(torch.abs(self.c * norm) + 1.0) + self.eps)

    def normalised_distance(self, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        """psi(i - j) / psi(max(L, i)): (Lq, Lk) fp32 in [0, 1] for visible keys ((B, Lq, Lk)
        for positions per sequence)."""
        rel = q_pos.to(torch.float32)[..., :, None] - k_pos.to(torch.float32)[..., None, :]
        return torch.log(torch.abs(self.c * rel) + 1.0) * \
            self.inverse_normaliser(q_pos)[..., :, None]

    def mlp(self, x: Tensor) -> Tensor:
        """f: (...,) fp32 -> (..., H) fp32, whatever dtype the weights are kept in."""
        w1, b1, w2, b2 = (p.float() for p in (self.w1, self.b1, self.w2, self.b2))
        hidden = torch.relu(x[..., None] * w1 + b1)                      # (..., W)
        return hidden @ w2.T + b2                                        # (..., H)

    def score_bias(self, q: Tensor, k: Tensor, at: HookContext) -> Tensor:
        q_pos, k_pos = at.q_pos, at.k_pos
        ranges = self._table_ranges(q_pos, k_pos)
        if ranges is not None:
            return self._bias_from_table(q_pos, k_pos, *ranges)
        bias = self.mlp(self.normalised_distance(q_pos, k_pos))         # ([B,] Lq, Lk, H)
        if bias.dim() == 3:
            bias = bias[None]
        return bias.permute(0, 3, 1, 2)                                  # (1|B, H, Lq, Lk)

    def _table_ranges(self, q_pos: Tensor, k_pos: Tensor) -> tuple[int, int, int, int] | None:
        """(q_lo, q_hi, k_lo, k_hi), the ranges of positions per sequence, when a table over
        them is cheaper than evaluating every pair; else None.

        A padded or packed batch repeats the same positions in every row, so its Nq * Nk
        distinct (query position, key position) pairs are far fewer than its B * Lq * Lk
        pairs. The ranges are read on the host, hence only on the CPU in eager mode (there is
        no device to synchronise with); elsewhere, and under torch.compile, None."""
        if (q_pos.dim() == 1 and k_pos.dim() == 1) or q_pos.device.type != "cpu" \
                or torch.compiler.is_compiling() or q_pos.numel() == 0 or k_pos.numel() == 0:
            return None
        q_lo, q_hi = (int(v) for v in torch.aminmax(q_pos))
        k_lo, k_hi = (int(v) for v in torch.aminmax(k_pos))
        n_q, n_k, l_q, l_k = q_hi - q_lo + 1, k_hi - k_lo + 1, q_pos.shape[-1], k_pos.shape[-1]
        batch = max(q_pos.shape[0] if q_pos.dim() == 2 else 1,
                    k_pos.shape[0] if k_pos.dim() == 2 else 1)
        if n_q * n_k >= batch * l_q * l_k or n_k > 2 * l_k:      # no saving, or rows too wide
            return None
        return q_lo, q_hi, k_lo, k_hi

    def _bias_from_table(self, q_pos: Tensor, k_pos: Tensor, q_lo: int, q_hi: int, k_lo: int,
                         k_hi: int) -> Tensor:
        """The bias (B, H, Lq, Lk) read from the MLP evaluated once per (query position, key
        position) in the ranges: each query's row of the (Nq, H, Nk) table, then its keys."""
        device = q_pos.device
        grid = self.normalised_distance(torch.arange(q_lo, q_hi + 1, device=device),
                                        torch.arange(k_lo, k_hi + 1, device=device))
        table = self.mlp(grid).transpose(1, 2)                           # (Nq, H, Nk)
        batch = max(q_pos.shape[0] if q_pos.dim() == 2 else 1,
                    k_pos.shape[0] if k_pos.dim() == 2 else 1)
        l_q, l_k = q_pos.shape[-1], k_pos.shape[-1]
        rows = (q_pos - q_lo).expand(batch, l_q).reshape(-1)
        rows = table.index_select(0, rows).view(batch, l_q, self.n_heads, -1).transpose(1, 2)
        keys = (k_pos - k_lo).expand(batch, l_k)[:, None, None, :]
        return rows.gather(-1, keys.expand(batch, self.n_heads, l_q, l_k))  # (B, H, Lq, Lk)

    def score_mod(self, q: Tensor, k: Tensor, at: HookContext) -> ScoreMod:
        q_pos, k_pos = at.q_pos, at.k_pos
        q_at = position_reader(q_pos.to(torch.float32))
        k_at = position_reader(k_pos.to(torch.float32))
        norm_at = position_reader(self.inverse_normaliser(q_pos))       # (Lq,) or (B, Lq)
        c, w1, b1, w2, b2 = self.c, self.w1, self.b1, self.w2, self.b2
        width = self.mlp_width

        def add_bias(score, b, h, q_idx, kv_idx):
            x = torch.log(torch.abs(c * (q_at(b, q_idx) - k_at(b, kv_idx))) + 1.0) * \
                norm_at(b, q_idx)
            acc = b2[h]
            for u in range(width):                                       # unrolled MLP
                acc = acc + w2[h, u] * torch.relu(w1[u] * x + b1[u])
            return score + acc.to(score.dtype)

        return add_bias

    def extra_repr(self) -> str:
        return (f"{super().extra_repr()}, mlp_width={self.mlp_width}, "
                f"c={float(self.c):.4g}, L={float((self.L_multiplier * self.init_L).abs()):.4g}")
