"""YaRN (Peng et al. 2023, "YaRN: Efficient Context Window Extension of Large Language Models",
ICLR 2024, Sec. 3.4, Eq. 20-22): NTK-by-parts interpolation between wavelengths set by
beta_fast and beta_slow, and an attention factor 0.1 ln s + 1."""

from __future__ import annotations

from .base import Citation, Option, register_method
from .frequency import FrequencyMethod


@register_method
class YaRN(FrequencyMethod):
    name = "yarn"
    rope_type = "yarn"
    summary = "NTK-by-parts interpolation and an attention factor"
    citation = Citation("Peng et al.", 2023, "YaRN: Efficient Context Window Extension of "
                        "Large Language Models", "ICLR 2024", "Sec. 3.4, Eq. 20-22")
    options = (Option("beta_fast", "rotations below which a frequency is interpolated fully "
                      "(default 32)"),
               Option("beta_slow", "rotations above which it is kept (default 1)"),
               Option("attention_factor", "the logits factor (default 0.1 ln s + 1)"),
               Option("mscale", "DeepSeek's mscale"),
               Option("mscale_all_dim", "DeepSeek's mscale_all_dim"),
               Option("truncate", "round the correction range (default True)"))
