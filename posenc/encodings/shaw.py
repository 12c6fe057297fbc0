"""Relative position representations on keys and values (Shaw, Uszkoreit & Vaswani, 2018).

With a_ij = clip(j - i, -K, K) (K = ``max_relative_position``) and two tables of 2K+1 vectors
of the head width, shared by the heads of a layer:

    e_ij = q_i . (k_j + A^K[a_ij]) / sqrt(d),        out_i = sum_j w_ij (v_j + A^V[a_ij])

The key term is gathered from the small table q A^K^T (B, H, Lq, 2K+1); the value term sums the
attention weights of each clipped distance (B, H, Lq, 2K+1) before multiplying by A^V, so no
(Lq, Lk, d) tensor of embeddings is built. In causal training (one block of consecutive
positions) distances below K are diagonals of the pair matrix and the rest share one column,
so both run as a masked pass plus K diagonal copies (kernels/layouts/clipped_pairs.py)
instead of a gather and a scatter-add over every pair. The value term needs the weights,
hence the eager (or fused) backend; ``relative_values=False`` keeps only the key term (HF
BERT's "relative_key"), which is a score_mod every backend computes.
The key term is declared once (``key_term``, a clipped query-side
:class:`~posenc.encodings.relative_term.RelativeTerm`); its gather, strided, clipped-pair and
score_mod forms are derived there.

``table="sinusoidal"`` replaces both learned tables by one fixed sinusoidal table of the
distances (NEZHA's functional relative positions, Wei et al., 2019). Distances are signed, so
the same encoding serves causal decoders and bidirectional encoders.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ..errors import UserError
from ..kernels.layouts.clipped_pairs import ClippedPairBias
from .base import PositionalEncoding, ScoreMod, register
from .checks import require_choice, require_float_in, require_positive_int
from .context import HookContext
from .relative_term import (
    RelativeTerm,
    clipped_rows,
    fused_relative_bias,
    relative_bias,
    relative_score_mod,
    relative_value_sum,
)
from .sinusoidal import sinusoidal_at

#: backends that compute the key term alone exactly
_KEY_TERM_BACKENDS = ("sdpa", "flex", "eager")


def _key_term_backends() -> tuple[str, ...]:
    return _KEY_TERM_BACKENDS


@register("shaw")
class ShawEncoding(PositionalEncoding):
    """Clipped relative embeddings added to keys and values (per layer, shared by heads).

    Options:
        max_relative_position: clipping distance K >= 1 (16): distances beyond share a vector.
        table: "learned" (two trainable tables) or "sinusoidal" (one fixed table, NEZHA).
        relative_values: add A^V to the values (True, the paper; eager backend only);
            False keeps the key term alone, which sdpa and flex compute too.
        init_std: std of the learned tables (0.02).
    """

    family = "relative"
    extrapolates = "yes (distances past K share one embedding)"
    distance_only = True
    per_layer = True

    def __init__(self, *, max_relative_position: int = 16, table: str = "learned",
                 relative_values: bool = True, init_std: float = 0.02, **kw) -> None:
        super().__init__(**kw)
        require_positive_int("max_relative_position", max_relative_position)
        self.table_kind = require_choice("table", table, ("learned", "sinusoidal"))
        if not isinstance(relative_values, bool):
            raise UserError(f"relative_values must be True or False, got {relative_values!r}")
        require_float_in("init_std", init_std, 0.0, float("inf"))
        self.max_relative_position = max_relative_position
        self.relative_values = relative_values
        n = 2 * max_relative_position + 1
        if table == "learned":
            self.key_table = nn.Parameter(torch.randn(n, self.head_dim) * init_std)
            self.value_table = (nn.Parameter(torch.randn(n, self.head_dim) * init_std)
                                if relative_values else None)
        else:                                         # one fixed table serves keys and values
            distances = torch.arange(-max_relative_position, max_relative_position + 1)
            self.register_buffer("key_table", sinusoidal_at(distances, self.head_dim),
                                 persistent=False)    # (2K+1, D)
            self.value_table = None
            self.per_layer = False                    # nothing to learn: layers can share it
        if not relative_values:
            # the class describes the paper's form (value term: eager only); without the value
            # term this instance is a pure score term that every backend computes exactly
            self.backends = _key_term_backends

    def clipped_index(self, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        """Row of each (query, key) pair in the tables: clip(j - i, -K, K) + K. -> (Lq, Lk),
        or (B, Lq, Lk) for positions per sequence."""
        return clipped_rows(q_pos[..., :, None] - k_pos[..., None, :], self.max_relative_position)

    def clipped_term(self, x: Tensor | None, table: Tensor, scale: float | None = None
                     ) -> RelativeTerm:
        """A term over the clipped rows of ``table`` (2K+1, D), shared by the heads."""
        dtype = table.dtype if x is None else x.dtype

        def heads(rows: Tensor | None) -> Tensor:                    # (R, D)
            return (table if rows is None else table[rows]).to(dtype)
        return RelativeTerm.clipped("query", x, heads, self.max_relative_position, scale)

    def key_term(self, q: Tensor) -> RelativeTerm:
        """The key term q . A^K[r] / sqrt(d), declared over the clipped table rows."""
        return self.clipped_term(q, self.key_table, self.sm_scale())

    def score_bias(self, q: Tensor, k: Tensor, at: HookContext) -> Tensor:
        return relative_bias([self.key_term(q)], at)                 # (B, H, Lq, Lk)

    def fused_bias(self, q: Tensor, k: Tensor, at: HookContext) -> ClippedPairBias | None:
        return fused_relative_bias([self.key_term(q)], at)

    def score_mod(self, q: Tensor, k: Tensor, at: HookContext) -> ScoreMod:
        return relative_score_mod([self.key_term(q)], at.q_pos, at.k_pos)

    def value_term(self, weights: Tensor, at: HookContext) -> Tensor | None:
        if not self.relative_values:
            return None
        table = self.key_table if self.value_table is None else self.value_table
        value = self.clipped_term(None, table.to(weights.dtype))
        return relative_value_sum(value, weights, at)                 # (B, H, Lq, D)

    def extra_repr(self) -> str:
        return (f"{super().extra_repr()}, max_relative_position={self.max_relative_position}, "
                f"table={self.table_kind!r}, relative_values={self.relative_values}")
