"""Dynamic NTK (emozilla 2023; Peng et al. 2023, YaRN, Sec. 3.3): NTK-aware scaling whose
factor follows the current length, max(1, s * length / original - (s - 1))."""

from __future__ import annotations

from .base import Citation, Option, register_method
from .frequency import FrequencyMethod


@register_method
class Dynamic(FrequencyMethod):
    name = "dynamic"
    rope_type = "dynamic"
    summary = "NTK-aware base grown with the current length"
    citation = Citation("Peng et al.", 2023, "YaRN: Efficient Context Window Extension of "
                        "Large Language Models", "ICLR 2024", "Sec. 3.3 (dynamic NTK)")
    factor_rule = "at_least_one"
    options = (Option("schedule", "'stepped' (posenc: the base grows at original x 2^k) or "
                      "'per_token' (Hugging Face)"),)
    hf_defaults = {"schedule": "per_token"}
    gguf_refusal = "llama.cpp has no dynamic NTK scaling (its frequencies follow the length)"
