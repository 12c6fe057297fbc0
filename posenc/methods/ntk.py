"""NTK-aware scaling (bloc97 2023; Peng et al. 2023, YaRN, Sec. 3.1): the RoPE base raised to
theta * s^(d / (d - 2)), so the lowest frequency is interpolated by s and the highest kept."""

from __future__ import annotations

from .base import Citation, register_method
from .frequency import FrequencyMethod


@register_method
class NTK(FrequencyMethod):
    name = "ntk"
    rope_type = "ntk"
    summary = "NTK-aware: base raised to theta * s^(d/(d-2))"
    citation = Citation("bloc97; Peng et al.", 2023, "NTK-aware scaling; YaRN: Efficient "
                        "Context Window Extension of Large Language Models", "ICLR 2024",
                        "Sec. 3.1")
