"""Lab runs beyond one encoding with its default options: p-RoPE, the named layer plans and
DroPE and
stick-breaking attention.

A comparison's ``encodings`` may name, besides every registered encoding, a *variant*: an
encoding with fixed options or a per-layer plan (:mod:`posenc.models.plans`), trained and
evaluated like any run and labelled by its variant name. A named plan's cycle (``every``:
Gemma 3 has one global layer in six, SmolLM3 and Llama 4 one NoPE layer in four) is
shortened to the model's depth when the model is shallower, so its last layer is always the
plan's odd one: with the lab's two layers, a local or chunked RoPE layer, then a global one.

A variant may train with a *scaffold*: DroPE (Gelberg, Eguchi, Akiba & Cetin 2026, "Extending
the Context of Pretrained LLMs by Dropping Their Positional Embeddings", ICLR 2026, Sec. 4)
trains with RoPE for the first :data:`DROPE_ROPE_FRACTION` of the steps, then drops it and
recalibrates without any positional encoding for the rest, at the same length, optimizer and
schedule (``TrainConfig.scaffold_pe``); the run is then a NoPE model. The split is this lab's
choice, not the paper's: the paper recalibrates pretrained models on a small fraction of their
pretraining tokens, but a 400-step run needs a quarter of its steps to recover its in-length
loss without positions.

A variant may also choose the model's attention form (``LMConfig.attn_form``):
``stick_breaking`` is NoPE with stick-breaking attention instead of the softmax (Tan et al.,
ICLR 2025: their models have no positional encoding), drawn in the panel of the distance
biases, whose fixed recency bias its learned one is compared with.

Variants take no inference-time scaling (those are for plain RoPE's trained weights).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any

from ...encodings import encoding_class, list_encodings
from ...errors import UserError
from ...models.plans import NAMED_PLANS


@dataclass(frozen=True)
class Variant:
    """A lab run's encoding ``pe`` with fixed ``pe_options``, a named ``plan`` and/or an
    attention form ``attn_form``; ``family`` is its panel in the figures."""

    pe: str
    summary: str
    family: str
    pe_options: dict[str, Any] = field(default_factory=dict)
    plan: str | None = None
    #: an encoding trained in place of ``pe`` for the first ``scaffold_fraction`` of the steps
    scaffold: str | None = None
    scaffold_fraction: float = 0.0
    attn_form: str = "softmax"


#: DroPE's share of the steps trained with RoPE before it is dropped (module docstring)
DROPE_ROPE_FRACTION = 0.75


#: the variants a comparison may name, in report order
VARIANTS: dict[str, Variant] = {
    "p_rope": Variant("rope", "RoPE keeping the highest 3/4 of its frequencies (p-RoPE, "
                      "Barbero et al. 2024)", "rotary", {"partial": 0.75}),
    "smollm3_plan": Variant("rope", "RoPE layers with a NoPE layer closing each cycle "
                            "(SmolLM3; Yang et al. 2025's RoPE/NoPE hybrid)", "plan",
                            plan="smollm3"),
    "llama4_plan": Variant("rope", "chunked-attention RoPE layers and a full NoPE layer with "
                           "Llama 4's attention temperature", "plan", plan="llama4"),
    "gemma3_plan": Variant("rope", "sliding-window RoPE layers (theta 10k) and a global RoPE "
                           "layer (theta 1M), as Gemma 3", "plan", plan="gemma3"),
    "drope": Variant("nope", "RoPE for the first 3/4 of the steps, then no positional "
                     "encoding for the rest (DroPE, Gelberg et al. 2026)", "rotary",
                     scaffold="rope", scaffold_fraction=DROPE_ROPE_FRACTION),
    "stick_breaking": Variant("nope", "stick-breaking attention instead of the softmax, no "
                              "positional encoding (Tan et al. 2025)", "bias",
                              attn_form="stick_breaking"),
}
#: a plan needs a layer of each of its kinds
MIN_PLAN_LAYERS = 2


def lab_run_names() -> list[str]:
    """Every name a comparison's ``encodings`` may hold: the encodings, then the variants."""
    return list_encodings() + list(VARIANTS)


def is_variant(name: str) -> bool:
    return name in VARIANTS


def base_encoding(name: str) -> str:
    """The registered encoding behind a lab run name (itself for an encoding)."""
    return VARIANTS[name].pe if name in VARIANTS else name


def run_family(name: str) -> str:
    """The figure panel of a lab run: its encoding's family, or the variant's ("plan")."""
    if name in VARIANTS:
        return VARIANTS[name].family
    try:
        return encoding_class(name).family
    except (KeyError, ValueError):
        return "none"


def variant_plan(name: str, n_layers: int) -> dict | None:
    """The plan of variant ``name`` for a model of ``n_layers`` (None: no plan)."""
    variant = VARIANTS[name]
    if variant.plan is None:
        return None
    if n_layers < MIN_PLAN_LAYERS:
        raise UserError(f"{name} needs a model of at least {MIN_PLAN_LAYERS} layers "
                         f"(n_layers={n_layers}): its plan has two kinds of layer")
    every = inspect.signature(NAMED_PLANS[variant.plan]).parameters["every"].default
    return {"name": variant.plan, "every": min(every, n_layers)}


def variant_scaffold(name: str, steps: int) -> dict[str, Any]:
    """The TrainConfig fields of variant ``name``'s scaffold for a run of ``steps`` steps
    ({} without one): ``scaffold_pe`` and ``scaffold_steps``."""
    variant = VARIANTS.get(name)
    if variant is None or variant.scaffold is None:
        return {}
    if steps < 2:
        raise UserError(f"{name} trains with {variant.scaffold} and then without it: it needs "
                        f"at least 2 steps, got {steps}")
    return {"scaffold_pe": variant.scaffold,
            "scaffold_steps": min(steps - 1, max(1, round(variant.scaffold_fraction * steps)))}


def attn_form(name: str) -> str:
    """The attention form of lab run ``name`` ("softmax" unless a variant chooses one)."""
    return VARIANTS[name].attn_form if name in VARIANTS else "softmax"


def takes_scaling(name: str, scaling: str) -> bool:
    """Whether lab run ``name`` is evaluated with inference scaling ``scaling`` as well."""
    from ...eval.inference_scaling import accepts_rope_scaling
    return not is_variant(name) and accepts_rope_scaling(name, scaling)


def variant_rows() -> list[dict[str, str]]:
    """One row per variant (for ``posenc list`` and the README): name, encoding, summary."""
    return [{"name": name, "pe": v.pe, "summary": v.summary} for name, v in VARIANTS.items()]
