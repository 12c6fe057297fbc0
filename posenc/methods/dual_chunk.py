"""Dual Chunk Attention (An et al. 2024, "Training-Free Long-Context Scaling of Large Language
Models", ICML, Sec. 3; the indices of the authors' ChunkLlama code): chunks of c = s - w tokens
(s: chunk size, w: local window); keys at j mod c; queries in the key's chunk (intra) at
i mod c, in the next chunk (successive) at min(c + i mod c, s), further (inter) at
min(2c - 1, s)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from ..errors import UserError
from .base import Citation, Option, register_method
from .regions import Region, RegionMethod, distance, positive_int


@register_method
@dataclass(frozen=True)
class DualChunk(RegionMethod):
    """Dual Chunk Attention with chunk size s = ``chunk_size`` and ``local_window`` w."""

    name = "dual_chunk"
    summary = "intra-, successive- and inter-chunk position indices"
    citation = Citation("An et al.", 2024, "Training-Free Long-Context Scaling of Large "
                        "Language Models", "ICML 2024", "Sec. 3")
    hf_config_loss = "intra-, successive- and inter-chunk position indices"
    options = (Option("chunk_size", "the chunk size s; default 3/4 of the original context "
                      "(the authors' code)", lambda original, factor, _: max(2, original * 3 // 4)),
               Option("local_window", "the local window w; default original / 16",
                      lambda original, factor, _: max(1, original // 16)))
    reads_factor = False
    rising_runs = True
    chunk_size: int
    local_window: int

    def __post_init__(self) -> None:
        positive_int("chunk_size", self.chunk_size)
        positive_int("local_window", self.local_window)
        if self.local_window >= self.chunk_size:
            raise UserError(f"local_window must be smaller than chunk_size "
                            f"({self.chunk_size}), got {self.local_window}")

    @property
    def chunk_len(self) -> int:
        """c = s - w: the tokens per chunk."""
        return self.chunk_size - self.local_window

    def longest_relative(self, length: int) -> float:
        return min(length - 1, min(2 * self.chunk_len - 1, self.chunk_size))

    def regions(self, q_pos: Tensor, k_pos: Tensor) -> list[Region]:
        c, s = self.chunk_len, self.chunk_size
        causal = distance(q_pos, k_pos) >= 0
        q_chunk, k_chunk = q_pos // c, k_pos // c
        gap = q_chunk[:, None] - k_chunk[None, :]               # (Tq, Tk)
        q_in, k_in = q_pos % c, k_pos % c
        return [Region("intra", causal & (gap == 0), q_in, k_in),
                Region("successive", gap == 1, (q_in + c).clamp(max=s), k_in),
                Region("inter", gap >= 2, torch.full_like(q_pos, min(2 * c - 1, s)), k_in)]
