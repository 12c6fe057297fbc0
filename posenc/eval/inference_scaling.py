"""Inference-time context extension of a trained RoPE model, without retraining.

``--rope-scaling linear:4 | ntk:4 | dynamic | yarn:4`` rebuilds the model's rotary encoding with
a Hugging Face style scaling dict (:func:`posenc.encodings.rope_scaling.parse_scaling_spec`),
whose original length is the training length; ``--logn`` multiplies the logits of a query
that sees n > L keys by log(n) / log(L). The weights are the trained ones, loaded unchanged
(RoPE frequencies are buffers outside the state dict).

Which encodings accept a frequency scaling is read from their options (a ``scaling`` option),
never from their names.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from ..errors import UserError
from ..encodings import encoding_class, encoding_options, list_encodings
from ..encodings.rope_scaling import LENGTH_DEPENDENT, parse_scaling_spec
from ..models import TransformerLM


@dataclass(frozen=True)
class InferenceScaling:
    """A frequency scaling spec (``"yarn:4"``) and/or log-n scaling."""

    rope_scaling: str | None = None
    logn: bool = False

    def __post_init__(self) -> None:
        if self.rope_scaling is not None:
            parse_scaling_spec(self.rope_scaling, 1)          # raises on a bad spec

    @property
    def label(self) -> str | None:
        """``"yarn:4"``, ``"logn"``, ``"yarn:4+logn"``, or None for no scaling."""
        parts = ([self.rope_scaling] if self.rope_scaling else []) + (
            ["logn"] if self.logn else [])
        return "+".join(parts) or None

    @classmethod
    def parse(cls, label: str | None) -> InferenceScaling:
        """Inverse of :attr:`label`: ``"ntk:4+logn"`` -> InferenceScaling("ntk:4", True)."""
        if not label:
            return cls()
        parts = label.split("+")
        logn = "logn" in parts
        rest = [p for p in parts if p != "logn"]
        if len(rest) > 1 or (logn and parts.count("logn") > 1):
            raise UserError(f"inference scaling {label!r}: give at most one rope scaling "
                             "and 'logn', e.g. 'yarn:4+logn'")
        return cls(rest[0] if rest else None, logn)


def run_label(run: Mapping[str, Any], spaced: bool = False) -> str:
    """The label of a run: its ``encoding``, then its ``inference_scaling`` label after a "+"
    if it has one ("rope", "rope+yarn:4"); ``spaced`` puts spaces around the "+" for figure
    legends ("rope + yarn:4"). ``run`` is a run of a comparison's results.json or anything
    with those two keys."""
    scaling = run.get("inference_scaling")
    if not scaling:
        return run["encoding"]
    return run["encoding"] + (" + " if spaced else "+") + scaling


def scalable_encodings() -> list[str]:
    """Registered encodings that accept a RoPE frequency ``scaling`` option."""
    return [name for name in list_encodings() if "scaling" in encoding_options(name)]


def accepts_rope_scaling(encoding: str, scaling: str | None = None) -> bool:
    """Whether ``encoding`` takes a RoPE frequency scaling at all or, given an inference
    scaling label (``"yarn:4"``, ``"dynamic+logn"``, ``"logn"``), that one: an encoding
    that declares ``length_dependent_scalings = False`` (M-RoPE) refuses dynamic NTK and
    LongRoPE."""
    if "scaling" not in encoding_options(encoding):
        return False
    spec = InferenceScaling.parse(scaling).rope_scaling if scaling else None
    if spec is None:
        return True
    kind = parse_scaling_spec(spec, 1)["rope_type"]
    return kind not in LENGTH_DEPENDENT or getattr(
        encoding_class(encoding), "length_dependent_scalings", True)


def apply_inference_scaling(model: TransformerLM, scaling: InferenceScaling,
                            original_len: int | None = None) -> TransformerLM:
    """A copy of ``model`` whose encoding uses ``scaling``, with the same weights.

    Args:
        original_len: the training length (the original context of the scalings and the
            base length of log-n); defaults to ``model.config.max_len``.

    Raises ValueError for a frequency scaling on an encoding without one (not RoPE), or when
    the run already uses a scaling or log-n.
    """
    config = model.config
    if scaling.label is None:
        return model
    original_len = original_len or config.max_len
    options = dict(config.pe_options)
    if scaling.rope_scaling is not None:
        if not accepts_rope_scaling(config.pe):
            raise UserError(
                f"--rope-scaling needs a RoPE run; this run uses encoding {config.pe!r} "
                f"(encodings with a frequency scaling: {', '.join(scalable_encodings())})")
        if options.get("scaling") is not None:
            raise UserError(f"this run was trained with scaling {options['scaling']}; "
                             "inference scaling applies to runs trained without one")
        options["scaling"] = parse_scaling_spec(scaling.rope_scaling, original_len)
    if scaling.logn:
        if options.get("logn_base_len") is not None:
            raise UserError(f"this run was trained with log-n scaling (logn_base_len="
                             f"{options['logn_base_len']}); --logn would apply it twice")
        options["logn_base_len"] = original_len
    param = next(model.parameters())
    scaled = TransformerLM(replace(config, pe_options=options)).to(param.device, param.dtype)
    scaled.load_state_dict(model.state_dict())
    return scaled.eval()
