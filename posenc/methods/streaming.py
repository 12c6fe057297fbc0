"""StreamingLLM (Xiao et al. 2023, "Efficient Streaming Language Models with Attention Sinks",
ICLR 2024, Sec. 3.2): a query sees the first n sink tokens and the last m tokens (itself
included), positions assigned within the cache: the cache holds n + m slots, so a recent key
keeps its distance d and a sink key is seen from the last slot, query at min(i, n + m - 1),
key at j. Older keys are invisible (and evicted from a cache)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from ..errors import UserError
from .base import Citation, Option, register_method
from .regions import Region, RegionMethod, distance, positive_int


@register_method
@dataclass(frozen=True)
class StreamingLLM(RegionMethod):
    """``sinks`` attention-sink tokens plus a rolling ``window`` of recent tokens."""

    name = "streaming"
    summary = "attention sinks and a rolling window, positions within the cache"
    citation = Citation("Xiao et al.", 2023, "Efficient Streaming Language Models with "
                        "Attention Sinks", "ICLR 2024", "Sec. 3.2")
    hf_config_loss = "the sink tokens and the rolling window with positions within the cache"
    options = (Option("sinks", "the attention-sink tokens n; default 4",
                      lambda original, factor, _: min(4, original // 2)),
               Option("window", "the recent tokens m (the query included); default "
                      "original - sinks", lambda original, factor, earlier:
                      max(1, original - earlier["sinks"])))
    reads_factor = False
    rising_runs = True
    evicts = True
    sinks: int
    window: int

    def __post_init__(self) -> None:
        if isinstance(self.sinks, bool) or not isinstance(self.sinks, int) or self.sinks < 0:
            raise UserError(f"sinks must be an integer >= 0, got {self.sinks!r}")
        positive_int("window", self.window)

    @property
    def cache_size(self) -> int:
        """n + m: the keys one query sees at most."""
        return self.sinks + self.window

    def longest_relative(self, length: int) -> float:
        return min(length, self.cache_size) - 1

    def regions(self, q_pos: Tensor, k_pos: Tensor, evicted: int = 0) -> list[Region]:
        """``evicted``: tokens dropped from the cache so far (between the sinks and the
        window); recent positions are then counted within the cache (i - evicted)."""
        d = distance(q_pos, k_pos)
        recent = (d >= 0) & (d < self.window)
        sink = (d >= self.window) & (k_pos < self.sinks)[None, :]
        slot_k = torch.where(k_pos < self.sinks, k_pos, k_pos - evicted)
        return [Region("recent", recent, q_pos - evicted, slot_k),
                Region("sink", sink, q_pos.clamp(max=self.cache_size - 1), k_pos)]

    def kept(self, total: int) -> Tensor:
        """Indices (of ``total`` cached tokens) that the next query still needs: the sinks and
        the last window - 1."""
        sinks = min(self.sinks, total)
        recent = max(sinks, total - (self.window - 1))
        return torch.cat((torch.arange(sinks), torch.arange(recent, total)))
