"""Multiplicative absolute positions: x_k * p_k instead of x_k + p_k.

Su's study notes (the "乘性位置编码" experiment) report that multiplying token embeddings by
position vectors can beat adding them. Two tables are offered:

- ``positions="learned"``: a trainable (max_len, C) table initialised at ``1 + N(0, init_std)``
  so that the product starts close to the plain token embedding (a table near zero would
  erase the tokens); positions at or past ``max_len`` raise UserError.
- ``positions="sinusoidal"``: the fixed Vaswani table, any length. Taken literally, x * PE
  zeroes the sine components at position 0 (sin 0 = 0); that is the formula, not a bug.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ..errors import UserError
from .base import PositionalEncoding, register
from .checks import check_in_range, require_choice, require_float_in
from .limits import PositionLimit, learned_table
from .sinusoidal import sinusoidal_at


@register("multiplicative")
class MultiplicativeEncoding(PositionalEncoding):
    """x_k ⊙ p_k with a learned or a sinusoidal table p.

    Options: ``positions`` ("learned" | "sinusoidal"), ``init_std`` (0.02, learned only:
    spread of the table around 1), ``base`` (10000, sinusoidal only).
    """

    family = "absolute"
    extrapolates = "no (learned: undefined past its table; sinusoidal: any length)"

    def __init__(self, *, positions: str = "learned", init_std: float = 0.02,
                 base: float = 10000.0, **kw) -> None:
        super().__init__(**kw)
        self.positions = require_choice("positions", positions, ("learned", "sinusoidal"))
        self.init_std = require_float_in("init_std", init_std, 0.0, float("inf"),
                                         low_open=False)
        self.base = require_float_in("base", base, 1.0, float("inf"))
        width = self.n_heads * self.head_dim
        if positions == "learned":
            if self.max_len is None:
                raise UserError("multiplicative positions='learned' needs max_len (the table "
                                 "size), a positive int")
            self.table = nn.Parameter(1.0 + torch.randn(self.max_len, width) * init_std)
        else:
            self.table = None

    @property
    def position_limit(self) -> PositionLimit | None:
        """A learned table's last row (sinusoidal positions: no bound)."""
        if self.table is None:
            return None
        return learned_table(self.max_len, self.name)

    def check_positions(self, pos: Tensor) -> None:
        """UserError if a learned table does not cover every position (sinusoidal: any)."""
        if self.table is None:
            return
        check_in_range(pos, 0, self.max_len, lambda bad: (
            f"position {bad} is outside the multiplicative table: positions must be in "
            f"[0, {self.max_len}) (max_len={self.max_len}); use positions='sinusoidal' or a "
            f"larger max_len"))

    def position_vectors(self, pos: Tensor, width: int) -> Tensor:
        """p at positions pos (T,) -> (T, width) fp32 (learned: the table's dtype)."""
        if self.table is None:
            return sinusoidal_at(pos, width, self.base)
        self.check_positions(pos)
        if width != self.table.shape[-1]:
            raise UserError(f"multiplicative table width {self.table.shape[-1]} != model "
                             f"width {width}")
        return self.table[pos]

    def embed(self, x: Tensor, pos: Tensor, *, ids: Tensor | None = None,
              state: dict | None = None) -> Tensor:
        return x * self.position_vectors(pos, x.shape[-1]).to(x.dtype)   # (T, C) over B

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, positions={self.positions!r}"
