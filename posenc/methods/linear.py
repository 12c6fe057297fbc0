"""Position interpolation (Chen et al. 2023, "Extending Context Window of Large Language Models
via Positional Interpolation", arXiv:2306.15595, Sec. 2.3): every position divided by the
factor s, i.e. every frequency."""

from __future__ import annotations

from .base import Citation, register_method
from .frequency import FrequencyMethod


@register_method
class Linear(FrequencyMethod):
    name = "linear"
    rope_type = "linear"
    summary = "position interpolation: every frequency divided by s"
    citation = Citation("Chen et al.", 2023, "Extending Context Window of Large Language "
                        "Models via Positional Interpolation", "arXiv:2306.15595", "Sec. 2.3")
