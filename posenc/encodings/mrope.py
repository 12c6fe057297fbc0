"""M-RoPE, multimodal rotary position embedding (Wang et al., 2024, "Qwen2-VL: Enhancing
Vision-Language Model's Perception of the World at Any Resolution", arXiv 2409.12191,
Sec. 2.1, Fig. 3).

Each token has three positions: temporal, height and width (an image patch: its frame, row
and column; a text token: the same value on all three axes). The R/2 rotary pairs (their
frequencies theta^(-2i/R), as RoPE) are split into three consecutive sections
``mrope_section`` = (s_t, s_h, s_w): pair i of section a is rotated by ``pos_a * inv_freq[i]``.
For text the three axes are equal and M-RoPE is RoPE. Qwen2-VL uses (16, 24, 24) for
head_dim 128 (transformers' ``Qwen2VLRotaryEmbedding``, the anchor of the tests).

A model hands the positions as ``at.axes`` (3, Lq) or (3, B, Lq) (``TransformerLM`` takes
positions (3, B, T)); without them every axis reads the 1-D positions (text).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from ..errors import UserError
from ..kernels.rotary import apply_rotary, rotary_angles
from .base import register
from .checks import check_qk
from .context import HookContext
from .rope import RotaryEncoding
from .rope_scaling import LENGTH_DEPENDENT


def default_sections(pairs: int, n_axes: int = 3) -> list[int]:
    """Qwen2-VL's proportions (1/4, 3/8, 3/8 of the pairs) for ``pairs`` rotary pairs:
    (16, 24, 24) for 64 pairs."""
    side = 3 * pairs // 8
    return [pairs - 2 * side, side, side] if n_axes == 3 else [pairs // 2, pairs - pairs // 2]


def check_sections(option: str, sections: Any, pairs: int, n_axes: int) -> list[int]:
    """``sections``: ``n_axes`` integers >= 0 summing to ``pairs``; UserError otherwise."""
    ok = isinstance(sections, Sequence) and not isinstance(sections, str) and \
        len(sections) == n_axes and all(isinstance(s, int) and not isinstance(s, bool) and
                                        s >= 0 for s in sections) and sum(sections) == pairs
    if not ok:
        raise UserError(f"{option} must be {n_axes} integers >= 0 summing to the rotary pairs "
                        f"rotary_dim/2={pairs}, got {sections!r}")
    return list(sections)


def axes_of(at: HookContext, n_axes: int) -> Tensor | None:
    """The per-axis positions of the hook's queries (A, Lq) or (A, B, Lq), or None; UserError
    when they are given for another number of axes."""
    if at.axes is None:
        return None
    if at.axes.shape[0] != n_axes:
        raise UserError(f"this encoding reads {n_axes} position axes, got axes of shape "
                        f"{tuple(at.axes.shape)}")
    return at.axes


@register("mrope")
class MultimodalRotaryEncoding(RotaryEncoding):
    """RoPE whose pairs are split into temporal, height and width sections.

    Options (besides RoPE's theta, layout, rotary_dim, scaling, partial):
        mrope_section: three integers >= 0 summing to rotary_dim/2 (default: Qwen2-VL's
            proportions, 1/4, 3/8, 3/8 of the pairs).

    Scalings that depend on the sequence length (dynamic, longrope) are refused: they
    re-encode cached keys from 1-D positions.
    """

    extrapolates = "as RoPE, per axis"
    cache_note = "exact (the positions per axis are given for each new token)"
    position_axes = 3
    length_dependent_scalings = False
    equals_on_text = "rope"
    equals_on_text_because = (
        "on text a token's three position axes are equal, so every section of the rotary "
        "pairs turns by the same position and M-RoPE is RoPE exactly (Wang et al. 2024, "
        "Qwen2-VL, Sec. 2.1: text tokens share one id on all three axes); from the same seed "
        "the two train and score identically")

    def __init__(self, *, mrope_section: Sequence[int] | None = None, **kw) -> None:
        super().__init__(**kw)
        if self.length_dependent:             # see length_dependent_scalings
            raise UserError(f"{self.name} does not support the scaling "
                            f"{self.scaling['rope_type']!r}; valid: a scaling that does not "
                            f"depend on the length (not {', '.join(sorted(LENGTH_DEPENDENT))})")
        pairs = self.rotary_dim // 2
        if mrope_section is None:
            mrope_section = default_sections(pairs, self.position_axes)
        self.mrope_section = check_sections("mrope_section", mrope_section, pairs,
                                            self.position_axes)

    def transform_qk(self, q: Tensor, k: Tensor, at: HookContext) -> tuple[Tensor, Tensor]:
        axes = axes_of(at, self.position_axes)
        if axes is None:                      # one position per token: every axis equal
            return super().transform_qk(q, k, at)
        check_qk(self, q, k, at)
        cos, sin = self.sectioned_cos_sin(axes)
        return (apply_rotary(q, cos, sin, self.layout), apply_rotary(k, cos, sin, self.layout))

    def sectioned_cos_sin(self, axes: Tensor) -> tuple[Tensor, Tensor]:
        """Positions per axis (3, L) or (3, B, L) -> cos and sin (times the attention factor)
        (L, R/2) or (B, L, R/2) fp32: section a's pairs rotated by axis a, each section's
        angles computed once, as RoPE's ``cos_sin`` computes them (the scalings allowed here
        fix the frequencies)."""
        angles, start = [], 0
        for axis, size in zip(axes, self.mrope_section):
            pairs = slice(start, start + size)
            angles.append(rotary_angles(axis, self.inv_freq[pairs],
                                        (self.turns_fixed[pairs], self.turns_rest[pairs])))
            start += size
        angles = torch.cat(angles, dim=-1)                             # (..., L, R/2)
        factor = self.attention_factor
        if factor == 1.0:
            return angles.cos(), angles.sin()
        return angles.cos() * factor, angles.sin() * factor

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, mrope_section={self.mrope_section}"
