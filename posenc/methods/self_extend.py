"""Self-Extend (Jin et al. 2024, "LLM Maybe LongLM: Self-Extend LLM Context Window Without
Tuning", ICML, Sec. 3; the shift as in the authors' LongLM code): neighbour attention with
exact positions for d < W; grouped attention beyond, query at floor(i / G) + W - W / G, key
at floor(j / G), so the relative position floor(i / G) - floor(j / G) + W - W / G continues
from W."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from .base import Citation, Option, register_method
from .regions import Region, RegionMethod, distance, positive_int


def _group(original: int, factor: float, window: int) -> int:
    """G = ceil((factor * original - 1 - W) / (original - 1 - W)): the longest relative
    position of factor * original tokens then stays below ``original``."""
    return max(1, math.ceil((factor * original - 1 - window) / max(1, original - 1 - window)))


@register_method
@dataclass(frozen=True)
class SelfExtend(RegionMethod):
    """Self-Extend: exact positions within ``window`` W, groups of ``group`` G beyond."""

    name = "self_extend"
    summary = "exact positions in a neighbour window, grouped positions floor(p / G) beyond"
    citation = Citation("Jin et al.", 2024, "LLM Maybe LongLM: Self-Extend LLM Context Window "
                        "Without Tuning", "ICML 2024", "Sec. 3")
    rising_runs = True
    hf_config_loss = "grouped positions floor(p / group) beyond the neighbour window"
    gguf_refusal = ("llama.cpp applies Self-Extend at run time (--grp-attn-n G --grp-attn-w W), "
                    "not from GGUF metadata")
    options = (Option("window", "the neighbour window W (tokens); default original / 4",
                      lambda original, factor, _: max(1, original // 4)),
               Option("group", "the group size G; default the smallest that keeps the "
                      "longest relative position of factor x original below original",
                      lambda original, factor, earlier: _group(original, factor,
                                                               earlier["window"])))
    window: int
    group: int

    def __post_init__(self) -> None:
        positive_int("window", self.window)
        positive_int("group", self.group)

    def longest_relative(self, length: int) -> float:
        if length <= self.window:
            return length - 1
        return (length - 1) // self.group + self.window - self.window / self.group

    def regions(self, q_pos: Tensor, k_pos: Tensor) -> list[Region]:
        d = distance(q_pos, k_pos)
        causal = d >= 0
        shift = self.window - self.window / self.group
        return [Region("neighbour", causal & (d < self.window), q_pos, k_pos),
                Region("grouped", d >= self.window,
                       torch.div(q_pos, self.group, rounding_mode="floor") + shift,
                       torch.div(k_pos, self.group, rounding_mode="floor"))]
