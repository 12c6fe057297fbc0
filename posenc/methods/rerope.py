"""ReRoPE (Su 2023, "Rectified Rotary Position Embeddings", kexue.fm/archives/9708): relative
positions d for d < w and w beyond (query at w, key at 0)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from .base import Citation, Option, register_method
from .regions import Region, RegionMethod, distance, positive_int

#: the source of ReRoPE and Leaky ReRoPE
SU_2023 = Citation("Su", 2023, "Rectified Rotary Position Embeddings",
                   "kexue.fm/archives/9708")
#: the default window w of both: a quarter of the original context
WINDOW = Option("window", "the window w within which positions are exact; default "
                "original / 4", lambda original, factor, _: max(1, original // 4))


@register_method
@dataclass(frozen=True)
class ReRoPE(RegionMethod):
    """ReRoPE: relative positions clipped at ``window`` w."""

    name = "rerope"
    summary = "relative positions exact below a window w, w beyond"
    citation = SU_2023
    hf_config_loss = "relative positions clipped at the window"
    options = (WINDOW,)
    reads_factor = False
    rising_runs = True
    window: int

    def __post_init__(self) -> None:
        positive_int("window", self.window)

    def longest_relative(self, length: int) -> float:
        return min(length - 1, self.window)

    def near(self, q_pos: Tensor, k_pos: Tensor) -> tuple[Region, Tensor]:
        """The region of exact positions (0 <= d < w) and the mask of the pairs beyond."""
        d = distance(q_pos, k_pos)
        return Region("near", (d >= 0) & (d < self.window), q_pos, k_pos), d >= self.window

    def regions(self, q_pos: Tensor, k_pos: Tensor) -> list[Region]:
        near, far = self.near(q_pos, k_pos)
        return [near, Region("far", far, torch.full_like(q_pos, self.window),
                             torch.zeros_like(k_pos))]
