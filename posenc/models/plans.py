"""Per-layer plans: which encoding, options, attention window and sinks each layer uses.

A model config holds one encoding for every layer (``pe``, ``pe_options``) and, optionally, a
``plan`` that gives each layer a *type*; layers of one type share one encoding instance
(unless the encoding has per-layer parameters). A plan is:

- a named plan: ``"gemma3"``, ``"smollm3"``, ``"llama4"`` (:data:`NAMED_PLANS`), or a dict
  ``{"name": "gemma3", "window": 64, ...}`` with the named plan's options;
- ``{"layers": [type, ...], "types": {type: options}}``: one type name per layer, or
  ``"layers": {"cycle": [type, ...]}``, a cycle repeated over the layers ("NoPE every 4th
  layer": ``{"cycle": ["rope", "rope", "rope", "nope"]}``). A type name that ``types`` does
  not define but that names an encoding is that encoding with its default options.

A type's options (all optional): ``pe`` (default: the config's), ``pe_options`` (added to the
config's options when the type keeps the config's encoding, else the type's own),
``window`` (tokens, 1..max_len) with ``window_kind`` "sliding" (default) or "chunked"
(:class:`~posenc.attention.masks.Window`), and ``sinks`` (learned sink logits; default: the
config's ``attn_sinks``).

Windows count positions: those a model builds count each sequence's real tokens (restarting
per packed document), so a row's window is the same alone, padded or packed. A windowed
layer's KV cache keeps only the last size - 1 tokens, which is exact while positions grow by
at least one per real token (always, for the positions a model builds); positions given by
a caller that repeat (several tokens at one position) need a plan without windows.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..attention.masks import Window, check_window_kind
from ..encodings import PositionalEncoding, encoding_class, list_encodings
from ..encodings.checks import require_known_keys, require_options
from ..errors import UserError

TYPE_OPTIONS = ("pe", "pe_options", "window", "window_kind", "sinks")


@dataclass(frozen=True)
class LayerSpec:
    """One layer's part of a plan: its type name, encoding, options, window and sinks."""

    type: str
    pe: str
    pe_options: dict[str, Any] = field(default_factory=dict)
    window: Window | None = None
    sinks: bool = False

    def encoding_key(self) -> tuple:
        """Layers with equal keys can share one encoding instance."""
        return self.pe, repr(sorted(self.pe_options.items()))


def gemma3(n_layers: int, max_len: int, *, window: int | None = None, every: int = 6,
           local_theta: float = 10_000.0, global_theta: float = 1_000_000.0) -> dict:
    """Gemma 3 (Gemma Team 2025, "Gemma 3 Technical Report", section 2): five local
    sliding-window layers (RoPE theta 10k) to one global layer (theta 1M); layer i is global
    when (i + 1) % ``every`` == 0, as transformers' ``Gemma3TextConfig.layer_types``.
    ``window`` defaults to max_len // 4 (Gemma 3: 1024 of 32k tokens)."""
    window = max(1, max_len // 4) if window is None else window
    return {"layers": {"cycle": ["local"] * (every - 1) + ["global"]},
            "types": {"local": {"pe": "rope", "pe_options": {"theta": local_theta},
                                "window": window, "window_kind": "sliding"},
                      "global": {"pe": "rope", "pe_options": {"theta": global_theta}}}}


def smollm3(n_layers: int, max_len: int, *, every: int = 4) -> dict:
    """SmolLM3 (Hugging Face 2025): RoPE layers with a NoPE layer every ``every``-th
    (transformers' ``no_rope_layers``: layer i has no RoPE when (i + 1) % every == 0), the
    RoPE/NoPE hybrid of Yang et al. 2025 ("Rope to Nope and Back Again", section 4)."""
    return {"layers": {"cycle": ["rope"] * (every - 1) + ["nope"]}, "types": {}}


def llama4(n_layers: int, max_len: int, *, chunk: int | None = None, every: int = 4,
           nope_options: dict | None = None) -> dict:
    """Llama 4 (Meta 2025; transformers' ``Llama4TextConfig``): RoPE layers with chunked local
    attention (a query sees its own chunk of ``chunk`` tokens: ``attention_chunk_size``) and
    a NoPE layer with full attention every ``every``-th (``no_rope_layers``), whose queries
    get Llama 4's attention temperature tuning (``attn_temperature_tuning``: logits times
    1 + 0.1 log(1 + floor((p + 1) / floor_scale))). ``chunk`` defaults to max_len // 4;
    Llama 4 sets the chunk and ``floor_scale`` both to 8192, so the temperature's floor here
    is the chunk too. ``nope_options``: the NoPE layers' encoding options instead (``{}``:
    no temperature).
    """
    chunk = max(1, max_len // 4) if chunk is None else chunk
    if nope_options is None:
        nope_options = {"temperature_floor": chunk, "temperature_scale": 0.1}
    return {"layers": {"cycle": ["rope"] * (every - 1) + ["nope"]},
            "types": {"rope": {"pe": "rope", "window": chunk, "window_kind": "chunked"},
                      "nope": {"pe": "nope", "pe_options": dict(nope_options)}}}


#: the plans a config may name, each a function (n_layers, max_len, **options) -> plan dict
NAMED_PLANS: dict[str, Callable[..., dict]] = {
    "gemma3": gemma3, "smollm3": smollm3, "llama4": llama4}
_NAMED_OPTIONS = {"gemma3": ("window", "every", "local_theta", "global_theta"),
                  "smollm3": ("every",), "llama4": ("chunk", "every", "nope_options")}
_SUMMARIES = {"gemma3": "five sliding-window RoPE layers (theta 10k) to one global (theta 1M)",
              "smollm3": "RoPE layers with a NoPE layer every fourth",
              "llama4": "chunked-attention RoPE layers with a full NoPE layer every fourth, "
                        "its attention temperature tuned"}


def describe_plans() -> list[dict[str, Any]]:
    """One row per named plan (for ``posenc list``): its name, a one-line summary and its
    options with their defaults (None: derived from max_len, see the plan's function)."""
    rows = []
    for name, build in NAMED_PLANS.items():
        params = inspect.signature(build).parameters
        rows.append({"name": name, "summary": _SUMMARIES[name],
                     "options": {key: params[key].default for key in _NAMED_OPTIONS[name]}})
    return rows


def expand_plan(plan: Any, n_layers: int, max_len: int) -> dict:
    """A plan in its explicit form {"layers": [...], "types": {...}} (module docstring)."""
    if isinstance(plan, str):
        plan = {"name": plan}
    if not isinstance(plan, dict):
        raise UserError(f"plan must be a plan name ({', '.join(NAMED_PLANS)}) or a dict with "
                        f"'layers' and 'types', got {type(plan).__name__}")
    if "name" in plan:
        name = plan["name"]
        if name not in NAMED_PLANS:
            raise UserError(f"unknown plan {name!r}; named plans: {', '.join(NAMED_PLANS)}")
        options = require_known_keys(f"plan {name!r}", {k: v for k, v in plan.items()
                                                         if k != "name"}, _NAMED_OPTIONS[name])
        if "every" in options and (isinstance(options["every"], bool) or
                                   not isinstance(options["every"], int) or
                                   options["every"] < 1):
            raise UserError(f"plan {name!r}: every must be an integer >= 1, got "
                            f"{options['every']!r}")
        plan = NAMED_PLANS[name](n_layers, max_len, **options)
    plan = require_known_keys("plan", plan, ("layers", "types"))
    layers = plan.get("layers")
    if isinstance(layers, dict):
        cycle = require_known_keys("plan layers", layers, ("cycle",)).get("cycle")
        if not isinstance(cycle, list) or not cycle:
            raise UserError(f"plan layers' cycle must be a non-empty list of layer types, "
                            f"got {cycle!r}")
        layers = [cycle[i % len(cycle)] for i in range(n_layers)]
    if not isinstance(layers, list) or len(layers) != n_layers:
        got = f"{len(layers)} entries" if isinstance(layers, list) else repr(layers)
        raise UserError(f"plan layers must list one layer type per layer (n_layers="
                        f"{n_layers}) or be {{'cycle': [...]}}, got {got}")
    types = plan.get("types", {})
    if not isinstance(types, dict):
        raise UserError(f"plan types must map layer type names to options, got {types!r}")
    return {"layers": list(layers), "types": types}


def resolve_plan(plan: Any, *, n_layers: int, max_len: int, pe: str,
                 pe_options: dict[str, Any], attn_sinks: bool = False
                 ) -> tuple[LayerSpec, ...]:
    """Each layer's :class:`LayerSpec`; ``plan`` None gives every layer the config's
    encoding (today's models). UserError naming the option for a plan that does not fit."""
    if plan is None:
        return tuple(LayerSpec("default", pe, dict(pe_options), None, attn_sinks)
                     for _ in range(n_layers))
    explicit = expand_plan(plan, n_layers, max_len)
    specs: dict[str, LayerSpec] = {}
    for name in explicit["layers"]:
        if name not in specs:
            specs[name] = _layer_type(name, explicit["types"], max_len, pe, pe_options,
                                      attn_sinks)
    return tuple(specs[name] for name in explicit["layers"])


def require_plan_fits(specs: tuple[LayerSpec, ...]) -> None:
    """UserError when a plan mixes encodings and one of them adds positions at the input
    (``embed``): a model has one input, so such an encoding cannot be per layer."""
    if len({spec.encoding_key() for spec in specs}) > 1:
        embedding = sorted(n for n in {spec.pe for spec in specs}
                           if encoding_class(n).overrides("embed"))
        if embedding:
            raise UserError(f"plan: encoding {embedding[0]!r} adds positions at the input and "
                            f"cannot vary per layer; plan layer types may use encodings that "
                            f"act in attention only (rope, alibi, nope, ...)")


def plan_encodings(specs: tuple[LayerSpec, ...],
                   build: Callable[[str, dict], PositionalEncoding]
                   ) -> list[PositionalEncoding]:
    """Each layer's encoding, ``build(name, options)`` once per layer type (once per layer
    for an encoding with per-layer parameters)."""
    shared: dict[tuple, PositionalEncoding] = {}
    layer_pes = []
    for spec in specs:
        key = spec.encoding_key()
        if key not in shared or shared[key].per_layer:
            pe = build(spec.pe, spec.pe_options)
            shared.setdefault(key, pe)
        layer_pes.append(pe if shared[key].per_layer else shared[key])
    return layer_pes


def distinct(encodings: list[PositionalEncoding]) -> list[PositionalEncoding]:
    """The distinct instances of ``encodings``, in order."""
    return list({id(e): e for e in encodings}.values())


def _layer_type(name: Any, types: dict, max_len: int, pe: str, pe_options: dict,
                attn_sinks: bool) -> LayerSpec:
    if not isinstance(name, str):
        raise UserError(f"plan layer types must be names, got {name!r}")
    if name in types:
        options = require_known_keys(f"plan type {name!r}", types[name], TYPE_OPTIONS)
    elif name in list_encodings():
        options = {"pe": name}
    else:
        raise UserError(f"unknown layer type {name!r} in the plan; define it in the plan's "
                        f"types ({', '.join(types) or 'none defined'}) or name an encoding "
                        f"(posenc list)")
    own_pe = options.get("pe", pe)
    if not isinstance(own_pe, str):
        raise UserError(f"plan type {name!r}: pe must be the name of an encoding, got "
                        f"{own_pe!r}")
    encoding_class(own_pe)                                     # unknown name -> UserError
    given = require_options(f"plan type {name!r} pe_options", options.get("pe_options"))
    merged = {**pe_options, **given} if own_pe == pe else dict(given)
    try:
        window = _declared_window(options, max_len)
    except UserError as err:
        raise UserError(f"plan type {name!r}: {err}") from None
    sinks = options.get("sinks", attn_sinks)
    if not isinstance(sinks, bool):
        raise UserError(f"plan type {name!r}: sinks must be True or False, got {sinks!r}")
    return LayerSpec(name, own_pe, merged, window, sinks)


def _declared_window(options: dict, max_len: int) -> Window | None:
    """A layer type's ``window`` and ``window_kind`` as a :class:`Window` (checked there;
    None without a window)."""
    kind = options.get("window_kind", "sliding")
    if options.get("window") is None:
        check_window_kind(kind)
        return None
    return Window.declare(options["window"], kind, max_len)
