"""Self-Extend (Jin et al. 2024, "LLM Maybe LongLM: Self-Extend LLM Context Window Without
Tuning", ICML, Sec. 3 and Algorithm 1): neighbour attention with exact positions for d < W;
grouped attention beyond, query at floor(i / G) + W - W // G, key at floor(j / G), so the
relative position floor(i / G) - floor(j / G) + W - W // G continues from W.

The shift is Algorithm 1's integer W - W // G (the authors' code also has a fractional
W - W / G, which differs only when G does not divide W), so every position stays an
integer. The defaults pick a window that G divides, which llama.cpp's
``--grp-attn-w`` requires (its ``completion`` tool asserts ``grp_attn_w % grp_attn_n == 0``)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from ..errors import UserError
from .base import Citation, Option, register_method
from .regions import Region, RegionMethod, distance, positive_int


def _group(original: int, factor: float, window: int) -> int:
    """G = ceil((factor * original - 1 - W) / (original - 1 - W)): the longest relative
    position of factor * original tokens then stays below ``original``."""
    return max(1, math.ceil((factor * original - 1 - window) / max(1, original - 1 - window)))


def _window(original: int, factor: float) -> int:
    """The largest W <= original / 4 that the group it needs divides (W % G == 0, as
    llama.cpp's --grp-attn-w requires)."""
    for window in range(max(1, original // 4), 0, -1):
        if window % _group(original, factor, window) == 0:
            return window
    return 1


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
    llama_cpp_run_time = True
    options = (Option("window", "the neighbour window W (tokens); default the largest up to "
                      "original / 4 that its group divides",
                      lambda original, factor, _: _window(original, factor)),
               Option("group", "the group size G; default the smallest that keeps the "
                      "longest relative position of factor x original below original",
                      lambda original, factor, earlier: _group(original, factor,
                                                               earlier["window"])))
    window: int
    group: int

    def __post_init__(self) -> None:
        positive_int("window", self.window)
        positive_int("group", self.group)

    @property
    def shift(self) -> int:
        """The grouped queries' shift W - W // G (Algorithm 1)."""
        return self.window - self.window // self.group

    def llama_cpp_flags(self) -> tuple[str, ...]:
        """llama.cpp's command-line flags for this G and W (``llama-completion``; it
        asserts that G divides W), or a UserError."""
        if self.window % self.group:
            raise UserError(f"llama.cpp needs the Self-Extend window to be a multiple of the "
                            f"group (--grp-attn-w % --grp-attn-n == 0), got window "
                            f"{self.window} and group {self.group}; choose e.g. window "
                            f"{self.window - self.window % self.group or self.group}")
        return ("--grp-attn-n", str(self.group), "--grp-attn-w", str(self.window))

    def longest_relative(self, length: int) -> float:
        if length <= self.window:
            return length - 1
        return (length - 1) // self.group + self.shift

    def regions(self, q_pos: Tensor, k_pos: Tensor) -> list[Region]:
        d = distance(q_pos, k_pos)
        causal = d >= 0
        return [Region("neighbour", causal & (d < self.window), q_pos, k_pos),
                Region("grouped", d >= self.window,
                       torch.div(q_pos, self.group, rounding_mode="floor") + self.shift,
                       torch.div(k_pos, self.group, rounding_mode="floor"))]
