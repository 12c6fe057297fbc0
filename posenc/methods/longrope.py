"""LongRoPE (Ding et al. 2024, "LongRoPE: Extending LLM Context Window Beyond 2 Million Tokens",
ICML 2024, Sec. 3): per-frequency factors found by search, a long and a short set."""

from __future__ import annotations

from .base import Citation, Option, register_method
from .frequency import FrequencyMethod


@register_method
class LongRoPE(FrequencyMethod):
    name = "longrope"
    rope_type = "longrope"
    summary = "per-frequency factors found by search (long and short sets)"
    citation = Citation("Ding et al.", 2024, "LongRoPE: Extending LLM Context Window Beyond 2 "
                        "Million Tokens", "ICML 2024", "Sec. 3")
    factor_rule = "at_least_one"
    options = (Option("long_factor", "head_dim/2 positive factors for long inputs (found by "
                      "the LongRoPE search)", required=True),
               Option("short_factor", "head_dim/2 positive factors for short inputs",
                      required=True),
               Option("attention_factor", "the logits factor (default "
                      "sqrt(1 + ln s / ln original))"))
    #: its factors come from a search, not from the command line
    spec_usable = False
