"""Inference-time context extension of a trained RoPE model, without retraining.

``--rope-scaling linear:4 | ntk:4 | dynamic | yarn:4`` rebuilds the model's rotary encoding with
a Hugging Face style scaling dict (:func:`posenc.encodings.rope_scaling.parse_scaling_spec`),
whose original length is the training length; ``--logn`` multiplies the logits of a query
that sees n > L keys by log(n) / log(L). The weights are the trained ones, loaded unchanged
(RoPE frequencies are buffers outside the state dict).

A region method of :mod:`posenc.attention.extension_methods` (``self_extend:4``,
``rerope``, ``leaky_rerope:4``, ``dual_chunk``, ``streaming``) instead patches the copy's
attention to score each (query, key) pair at the method's remapped position
(:func:`posenc.attention.region_patch.apply_region_method`), with the defaults of
:func:`~posenc.attention.extension_methods.build_method` for a model trained on L tokens and
meant for factor x L. Only Self-Extend and Leaky ReRoPE read the factor.

Which encodings accept a frequency scaling is read from their options (a ``scaling`` option),
never from their names.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from ..attention.extension_methods import METHOD_OPTIONS as REGION_OPTIONS
from ..attention.extension_methods import build_method
from ..attention.region_patch import apply_region_method, region_ready
from ..encodings import encoding_class, encoding_options, list_encodings
from ..errors import UserError
from ..encodings.rope_scaling import LENGTH_DEPENDENT, parse_scaling_spec
from ..models import TransformerLM


#: region methods (names as :mod:`posenc.attention.extension_methods` has them)
REGION_METHODS = tuple(REGION_OPTIONS)
#: region methods whose positions depend on the factor (the others take none)
FACTOR_METHODS = ("self_extend", "leaky_rerope")
#: the factor of ``self_extend`` / ``leaky_rerope`` without one, as in ``linear:4``
DEFAULT_REGION_FACTOR = 4.0


def parse_region_spec(spec: str) -> tuple[str, float]:
    """``"self_extend:4"`` -> ("self_extend", 4.0); ``"rerope"`` -> ("rerope", 4.0).

    Raises UserError for an unknown method, a factor <= 1, or a factor on a method that
    takes none."""
    name, colon, value = spec.partition(":")
    if name not in REGION_METHODS:
        raise UserError(f"unknown region method {name!r} in {spec!r}; valid: "
                         f"{', '.join(REGION_METHODS)}")
    if not colon:
        return name, DEFAULT_REGION_FACTOR
    if name not in FACTOR_METHODS:
        raise UserError(f"region method {name!r} takes no factor (got {spec!r}); only "
                         f"{' and '.join(FACTOR_METHODS)} read one")
    try:
        factor = float(value)
    except ValueError:
        factor = float("nan")
    if not factor > 1:
        raise UserError(f"region method {spec!r}: the factor must be a number > 1")
    return name, factor


def _is_region(part: str) -> bool:
    return part.partition(":")[0] in REGION_METHODS


@dataclass(frozen=True)
class InferenceScaling:
    """A frequency scaling spec (``"yarn:4"``) and/or log-n scaling, or a region method
    (``"self_extend:4"``) alone."""

    rope_scaling: str | None = None
    logn: bool = False
    region: str | None = None

    def __post_init__(self) -> None:
        if self.rope_scaling is not None:
            parse_scaling_spec(self.rope_scaling, 1)          # raises on a bad spec
        if self.region is not None:
            parse_region_spec(self.region)
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
        parts = label.split("+")
        regions = [p for p in parts if _is_region(p)]
        if regions:
            if len(parts) > 1:
                raise UserError(f"inference scaling {label!r}: a region method "
                                 f"({regions[0]}) goes alone, without '+'")
            return cls(region=regions[0])
        logn = "logn" in parts
        rest = [p for p in parts if p != "logn"]
        if len(rest) > 1 or (logn and parts.count("logn") > 1):
            raise UserError(f"inference scaling {label!r}: give at most one rope scaling "
                             "and 'logn', e.g. 'yarn:4+logn', or one region method "
                             f"({', '.join(REGION_METHODS)})")
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
    LongRoPE. A region method needs an encoding class it takes (``region_ready``: ``rope``
    itself, not a variant); a run's options are checked when it is applied."""
    if "scaling" not in encoding_options(encoding):
        return False
    parsed = InferenceScaling.parse(scaling) if scaling else None
    if parsed is not None and parsed.region is not None:
        return region_ready(encoding_class(encoding)) is None
    spec = parsed.rope_scaling if parsed else None
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


def _with_region_method(model: TransformerLM, spec: str, original_len: int) -> TransformerLM:
    """A copy of ``model`` with the same weights whose attention uses region method ``spec``."""
    name, factor = parse_region_spec(spec)
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
    apply_region_method(patched, build_method(name, original_len, factor))
    return patched.eval()


def has_attention_weights(scaling: str | None) -> bool:
    """Whether a run with inference scaling ``scaling`` can return attention weights (for
    entropy): a region method's patched attention does not."""
    return not scaling or InferenceScaling.parse(scaling).region is None
