"""2-D axial RoPE for a grid of patches (Heo, Park, Han and Yun, 2024, "Rotary Position
Embedding for Vision Transformer", ECCV, arXiv 2403.13298: RoPE-Axial, the "axial frequency"
of their ``compute_axial_cis``).

A patch at row r and column c rotates half of its pairs by its row and the other half by its
column, each half with the full range of frequencies ``theta^(-t/(R/4))``, t = 0..R/4-1 (R the
rotated dimensions; Heo et al. take theta = 100 for images). Since each pair reads one axis,
``<R(r1, c1) q, R(r2, c2) k>`` depends only on (r2 - r1, c2 - c1): the relative property holds
along each axis separately. A model hands the positions as ``at.axes`` (2, Lq) or (2, B, Lq),
rows first (their code rotates the first half by the column: the same up to a permutation
of the pairs; ``TransformerLM`` takes positions (2, B, T)); without them a 1-D position p is
read as the patch of a raster scan over rows of ``grid_width`` patches: (p // grid_width,
p % grid_width).
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..errors import UserError
from ..kernels.rotary import apply_rotary, frequency_turns, rotary_angles
from .base import PositionalEncoding, register
from .checks import check_qk, require_choice, require_float_in, require_positive_int
from .context import HookContext
from .fp32_buffers import KeepsFp32Buffers
from .mrope import axes_of


@register("axial_rope")
class AxialRotaryEncoding(KeepsFp32Buffers, PositionalEncoding):
    """RoPE over (row, column): the first half of the pairs by the row, the second half by
    the column.

    Options:
        theta: base of each axis's frequencies theta^(-t/(head_dim/4)) (100, as Heo et al.).
        layout: "half" | "interleaved" (which dimensions form a pair, as RoPE).
        grid_width: patches per row, for 1-D positions p -> (p // grid_width, p % grid_width)
            (16).
    """

    family = "rotary"
    extrapolates = "reported better than learned tables at larger images (Heo et al., 2024)"
    position_axes = 2

    def __init__(self, *, theta: float = 100.0, layout: str = "half", grid_width: int = 16,
                 **kw) -> None:
        super().__init__(**kw)
        self.theta = require_float_in("theta", theta, 1.0, float("inf"))
        self.layout = require_choice("layout", layout, ("half", "interleaved"))
        require_positive_int("grid_width", grid_width)
        self.grid_width = grid_width
        if self.head_dim % 4:
            raise UserError(f"axial_rope needs a head_dim divisible by 4 (half of the pairs "
                            f"per axis), got head_dim={self.head_dim}")
        quarter = self.head_dim // 4
        inv_freq = 1.0 / self.theta ** (torch.arange(quarter, dtype=torch.float32) / quarter)
        fixed, rest = frequency_turns(inv_freq)
        self.register_buffer("inv_freq", inv_freq, persistent=False)             # (D/4,)
        self.register_buffer("turns_fixed", fixed, persistent=False)
        self.register_buffer("turns_rest", rest, persistent=False)

    def grid(self, at: HookContext) -> tuple[Tensor, Tensor]:
        """(rows, columns) of the queries, each (Lq,) or (B, Lq)."""
        axes = axes_of(at, self.position_axes)
        if axes is not None:
            return axes[0], axes[1]
        return at.q_pos // self.grid_width, at.q_pos % self.grid_width

    def angles(self, rows: Tensor, columns: Tensor) -> Tensor:
        """Angles (L, D/2) or (B, L, D/2) fp32: the rows' then the columns' (D/4 each)."""
        turns = (self.turns_fixed, self.turns_rest)
        return torch.cat((rotary_angles(rows, self.inv_freq, turns),
                          rotary_angles(columns, self.inv_freq, turns)), dim=-1)

    def transform_qk(self, q: Tensor, k: Tensor, at: HookContext) -> tuple[Tensor, Tensor]:
        check_qk(self, q, k, at)
        q_angles = self.angles(*self.grid(at))
        if at.q_pos is at.k_pos:
            k_angles = q_angles
        else:                                  # keys at other 1-D positions (no axes then)
            k_angles = self.angles(at.k_pos // self.grid_width, at.k_pos % self.grid_width)
        return (apply_rotary(q, q_angles.cos(), q_angles.sin(), self.layout),
                apply_rotary(k, k_angles.cos(), k_angles.sin(), self.layout))

    def extra_repr(self) -> str:
        return (f"{super().extra_repr()}, theta={self.theta}, layout={self.layout!r}, "
                f"grid_width={self.grid_width}")
