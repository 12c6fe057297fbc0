"""Absolute encodings without a formula: no positions at all (``nope``) and a learned table."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ..errors import UserError
from .base import PositionalEncoding, register
from .checks import check_in_range, require_positive_int
from .limits import PositionLimit, learned_table


@register("nope")
class NoPositionalEncoding(PositionalEncoding):
    """No positional information; a causal mask alone lets a decoder infer order."""

    family = "none"
    extrapolates = "some (causal mask only)"


@register("learned")
class LearnedEncoding(PositionalEncoding):
    """x_p + P[p] with a trainable table P of ``max_len`` rows (GPT-2, BERT).

    Positions at or past ``max_len`` raise UserError: the table is never clipped.
    """

    family = "absolute"
    extrapolates = "no (undefined past its table)"

    def __init__(self, *, init_std: float = 0.02, **kw) -> None:
        super().__init__(**kw)
        if self.max_len is None:
            raise UserError("learned encoding needs max_len (the table size), a positive int")
        require_positive_int("max_len", self.max_len)
        self.table = nn.Parameter(torch.randn(self.max_len, self.n_heads * self.head_dim)
                                  * init_std)

    @property
    def position_limit(self) -> PositionLimit:
        return learned_table(self.max_len, self.name)

    def check_positions(self, pos: Tensor) -> None:
        """UserError if any position lies outside the table [0, max_len) (checked as
        :func:`~posenc.encodings.checks.check_in_range` does: eagerly on the CPU)."""
        check_in_range(pos, 0, self.max_len, lambda bad: (
            f"position {bad} is outside the learned table: positions must be in "
            f"[0, {self.max_len}) (max_len={self.max_len}); use an encoding that "
            f"extrapolates or a larger max_len"))

    def embed(self, x: Tensor, pos: Tensor, *, ids: Tensor | None = None,
              state: dict | None = None) -> Tensor:
        self.check_positions(pos)
        if x.shape[-1] != self.table.shape[-1]:
            raise UserError(f"learned table width {self.table.shape[-1]} != model width "
                             f"{x.shape[-1]}")
        return x + self.table[pos].to(x.dtype)  # (T, C) broadcast over B
