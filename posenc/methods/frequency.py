"""Frequency methods: a new set of RoPE frequencies for a longer context, given as a scaling
dict of :mod:`posenc.encodings.rope_scaling` (Hugging Face's ``rope_parameters`` form)."""

from __future__ import annotations

from typing import Any, ClassVar

from ..encodings.rope_scaling import LENGTH_DEPENDENT, scaling_keys, validate_scaling
from .base import ExtensionMethod


class FrequencyMethod(ExtensionMethod):
    """Base of the frequency methods: ``rope_type`` names the scaling they produce."""

    kind = "frequency"
    rope_type: ClassVar[str] = ""

    @classmethod
    def length_dependent(cls) -> bool:
        """Whether the frequencies follow the current length (then an exact cache applies)."""
        return cls.rope_type in LENGTH_DEPENDENT

    @classmethod
    def rope_scaling(cls, original: int, factor: float, options: dict[str, Any],
                     rotary_dim: int | None = None) -> dict[str, Any]:
        """The validated scaling dict for a model pretrained on ``original`` positions."""
        scaling = {"rope_type": cls.rope_type, "factor": float(factor), **options}
        if "original_max_position_embeddings" in scaling_keys(cls.rope_type):
            scaling["original_max_position_embeddings"] = original
        return validate_scaling(scaling, rotary_dim=rotary_dim)
