"""Inference-time context extension of a trained RoPE model, without retraining.

A method spec of :mod:`posenc.methods.spec` names what to apply (``yarn:4``, ``ntk:4+logn``,
``dynamic``, ``logn``, ``self_extend:4``, ``rerope``); the training length is the original
context. A frequency method rebuilds the model's rotary encoding with its scaling dict
(:meth:`~posenc.methods.frequency.FrequencyMethod.rope_scaling`); ``logn`` multiplies the
logits of a query that sees n > L keys by log(n) / log(L). The weights are the trained ones,
loaded unchanged (RoPE frequencies are buffers outside the state dict).

A region method (:mod:`posenc.methods.regions`) instead sets the copy's attention to score each
(query, key) pair at the method's remapped position
(:func:`posenc.attention.region_patch.apply_region_method`), with the method's defaults for a
model trained on L tokens and meant for factor x L (:data:`DEFAULT_REGION_FACTOR` when the spec
gives none and the method reads one).

Which encodings accept a frequency scaling is read from their options (a ``scaling`` option),
never from their names.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from ..attention.region_patch import apply_region_method, region_ready
from ..encodings import encoding_class, encoding_options, list_encodings
from ..errors import UserError
from ..methods import MethodSpec, build_method, list_methods, parse_method_spec
from ..models import TransformerLM

#: the factor of a region method that reads one, when the spec gives none (as in ``linear:4``)
DEFAULT_REGION_FACTOR = 4.0


def spec_help() -> str:
    """The forms a comparison's ``scalings`` take, from the method registry."""
    frequency = [m for m in list_methods("frequency") if _spec_usable(m)]
    return (f"frequency methods {', '.join(frequency)} (NAME:FACTOR, e.g. yarn:4; dynamic "
            f"alone), '+logn' or logn alone, or one region method "
            f"({', '.join(list_methods('region'))}; e.g. self_extend:4)")


def _spec_usable(name: str) -> bool:
    from ..methods import method_class
    return getattr(method_class(name), "spec_usable", True)


@dataclass(frozen=True)
class InferenceScaling:
    """A frequency method's spec (``"yarn:4"``) and/or log-n scaling, or a region method's
    spec (``"self_extend:4"``) alone."""

    rope_scaling: str | None = None
    logn: bool = False
    region: str | None = None

    def __post_init__(self) -> None:
        if self.rope_scaling is not None:
            spec = parse_method_spec(self.rope_scaling)
            if spec.method.kind != "frequency" or spec.logn or spec.exact:
                raise UserError(f"rope scaling {self.rope_scaling!r} must be one frequency "
                                f"method ({', '.join(list_methods('frequency'))}), e.g. "
                                "'yarn:4'")
            spec.method.check_factor(spec.factor)          # 'yarn' alone: shows 'yarn:4'
            if not _spec_usable(spec.name):
                raise UserError(f"method {spec.name!r} takes options a spec cannot give "
                                "(its factors come from a search); use the Python API")
        if self.region is not None:
            spec = parse_method_spec(self.region)
            if spec.method.kind != "region":
                raise UserError(f"{self.region!r} is not a region method; region methods: "
                                f"{', '.join(list_methods('region'))}")
            if self.rope_scaling is not None or self.logn:
                raise UserError(f"region method {self.region!r} goes alone: it remaps "
                                "positions itself, so no rope scaling or logn with it")

    @property
    def label(self) -> str | None:
        """``"yarn:4"``, ``"logn"``, ``"yarn:4+logn"``, ``"self_extend:4"``, or None."""
        if self.region is not None:
            return self.region
        parts = ([self.rope_scaling] if self.rope_scaling else []) + (
            ["logn"] if self.logn else [])
        return "+".join(parts) or None

    @classmethod
    def parse(cls, label: str | None) -> InferenceScaling:
        """Inverse of :attr:`label`: ``"ntk:4+logn"`` -> InferenceScaling("ntk:4", True)."""
        if not label:
            return cls()
        spec = parse_method_spec(label)
        if spec.exact:
            raise UserError(f"inference scaling {label!r}: '+exact' applies to a Hugging Face "
                            "model's cache (posenc extend); a comparison's models recompute "
                            "their keys")
        if spec.method.kind == "region":
            return cls(region=spec.label)
        head = MethodSpec(spec.name, spec.factor).label if spec.name != "none" else None
        return cls(head, spec.logn)


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
    LongRoPE. A region method needs an encoding class it takes (``region_ready``: ``rope``
    itself, not a variant); a run's options are checked when it is applied."""
    if "scaling" not in encoding_options(encoding):
        return False
    parsed = InferenceScaling.parse(scaling) if scaling else None
    if parsed is not None and parsed.region is not None:
        return region_ready(encoding_class(encoding)) is None
    if parsed is None or parsed.rope_scaling is None:
        return True
    method = parse_method_spec(parsed.rope_scaling).method
    return not method.length_dependent() or getattr(
        encoding_class(encoding), "length_dependent_scalings", True)


def _rope_scaling(spec_text: str, original_len: int) -> dict[str, Any]:
    """The scaling dict of frequency method spec ``spec_text`` for ``original_len``."""
    spec = parse_method_spec(spec_text)
    method = spec.method
    factor = method.check_factor(spec.factor)
    return method.rope_scaling(original_len, factor,
                               method.resolve_options(original_len, factor, {}))


def apply_inference_scaling(model: TransformerLM, scaling: InferenceScaling,
                            original_len: int | None = None) -> TransformerLM:
    """A copy of ``model`` whose encoding uses ``scaling``, with the same weights.

    Args:
        original_len: the training length (the original context of the scalings and the
            base length of log-n); defaults to ``model.config.max_len``.

    Raises UserError for a frequency scaling on an encoding without one (not RoPE), or when
    the run already uses a scaling or log-n.
    """
    config = model.config
    if scaling.label is None:
        return model
    original_len = original_len or config.max_len
    if scaling.region is not None:
        return _with_region_method(model, scaling.region, original_len)
    options = dict(config.pe_options)
    if scaling.rope_scaling is not None:
        if not accepts_rope_scaling(config.pe):
            raise UserError(
                f"--rope-scaling needs a RoPE run; this run uses encoding {config.pe!r} "
                f"(encodings with a frequency scaling: {', '.join(scalable_encodings())})")
        if options.get("scaling") is not None:
            raise UserError(f"this run was trained with scaling {options['scaling']}; "
                             "inference scaling applies to runs trained without one")
        options["scaling"] = _rope_scaling(scaling.rope_scaling, original_len)
    if scaling.logn:
        if options.get("logn_base_len") is not None:
            raise UserError(f"this run was trained with log-n scaling (logn_base_len="
                             f"{options['logn_base_len']}); --logn would apply it twice")
        options["logn_base_len"] = original_len
    param = next(model.parameters())
    scaled = TransformerLM(replace(config, pe_options=options)).to(param.device, param.dtype)
    scaled.load_state_dict(model.state_dict())
    return scaled.eval()


def _with_region_method(model: TransformerLM, spec: str, original_len: int) -> TransformerLM:
    """A copy of ``model`` with the same weights whose attention uses region method ``spec``."""
    parsed = parse_method_spec(spec)
    factor = parsed.factor
    if factor is None and parsed.method.reads_factor:
        factor = DEFAULT_REGION_FACTOR
    if not accepts_rope_scaling(model.config.pe, spec):
        raise UserError(f"region method {spec!r} needs a plain rope run; this run uses "
                         f"encoding {model.config.pe!r}")
    for encoding in model.encodings:          # its options (and a plan's other layer types)
        reason = region_ready(encoding)
        if reason is not None:
            raise UserError(f"region method {spec!r}: {reason}")
    param = next(model.parameters())
    patched = TransformerLM(model.config).to(param.device, param.dtype)
    patched.load_state_dict(model.state_dict())
    apply_region_method(patched, build_method(parsed.name, original_len, factor))
    return patched.eval()


def has_attention_weights(scaling: str | None) -> bool:
    """Whether a run with inference scaling ``scaling`` can return attention weights (for
    entropy): a region method's patched attention does not."""
    return not scaling or InferenceScaling.parse(scaling).region is None
