"""Llama 3.1's RoPE scaling (Dubey et al. 2024, "The Llama 3 Herd of Models"; the factors of
Meta's Llama 3.1 release): low frequencies divided by s, high ones kept, a smooth ramp between
the wavelengths set by low_freq_factor and high_freq_factor."""

from __future__ import annotations

from .base import Citation, Option, register_method
from .frequency import FrequencyMethod


@register_method
class Llama3(FrequencyMethod):
    name = "llama3"
    rope_type = "llama3"
    summary = "low frequencies divided by s, high kept, a ramp between"
    citation = Citation("Dubey et al.", 2024, "The Llama 3 Herd of Models",
                        place="Llama 3.1 RoPE scaling")
    options = (Option("low_freq_factor", "default 1 (Meta's Llama 3.1 release)",
                      lambda original, factor, _: 1.0),
               Option("high_freq_factor", "default 4 (Meta's Llama 3.1 release)",
                      lambda original, factor, _: 4.0))
