"""Leaky ReRoPE (Su 2023, "Rectified Rotary Position Embeddings", kexue.fm/archives/9708):
relative positions d below the window w, w + (d - w) / k beyond (query at i / k + w (1 - 1/k),
key at j / k)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from torch import Tensor

from ..errors import UserError
from .base import Option, register_method
from .regions import Region
from .rerope import SU_2023, WINDOW, ReRoPE


def _leak(original: int, factor: float, window: int) -> float:
    """k = (factor * original - w) / (original - w - 1): the longest relative position of
    factor x original tokens then stays below ``original``."""
    return max(1.0 + 1e-6, (factor * original - window) / max(1, original - window - 1))


@register_method
@dataclass(frozen=True)
class LeakyReRoPE(ReRoPE):
    """Leaky ReRoPE: slope 1 / ``leak`` beyond ``window`` w."""

    name = "leaky_rerope"
    summary = "relative positions exact below a window w, compressed by 1/k beyond"
    citation = SU_2023
    hf_config_loss = "relative positions compressed by the leak beyond the window"
    options = (WINDOW, Option("leak", "the slope 1/k beyond the window; default the k that "
                              "keeps factor x original below original",
                              lambda original, factor, earlier: _leak(original, factor,
                                                                      earlier["window"])))
    reads_factor = True
    leak: float = 2.0

    def __post_init__(self) -> None:
        super().__post_init__()
        if isinstance(self.leak, bool) or not isinstance(self.leak, (int, float)) \
                or not math.isfinite(self.leak) or self.leak <= 1:
            raise UserError(f"leak must be a number > 1 (the slope 1/k beyond the window), "
                            f"got {self.leak!r}")

    def longest_relative(self, length: int) -> float:
        d = length - 1
        return d if d < self.window else self.window + (d - self.window) / self.leak

    def regions(self, q_pos: Tensor, k_pos: Tensor) -> list[Region]:
        near, far = self.near(q_pos, k_pos)
        # in units of 1 / leak positions: (i + w (k - 1)) / k and j / k, whole keys
        shift = self.window * (self.leak - 1)
        far_q = q_pos + (int(shift) if float(shift).is_integer() else shift)
        return [near, Region("far", far, far_q, k_pos, 1 / self.leak)]
