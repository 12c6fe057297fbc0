"""Context extension of Hugging Face causal LMs with RoPE, by patching one model in place.

``extend(model, "yarn", 2.0)`` replaces the model's rotary embedding module with one that
takes its frequencies from posenc's pure functions
(:func:`posenc.encodings.rope_scaling.compute_inv_freq` through a posenc ``rope`` encoding),
so every method goes through one code path:

===========  ==============================  =====================================
method       Hugging Face ``rope_type``      saved as
===========  ==============================  =====================================
none         default                         unchanged
linear       linear (position interpolation) ``linear``
ntk          none (static NTK-aware)         ``default`` with ``rope_theta`` raised
dynamic      dynamic                         ``dynamic`` (stale cache, see below)
yarn         yarn                            ``yarn``
llama3       llama3                          ``llama3``
longrope     longrope                        ``longrope``
===========  ==============================  =====================================

Add-ons that patch the attention modules as well (one generic forward for the family):

- ``logn=True`` multiplies each query by ``max(1, log(p + 1) / log(original))`` (p = its
  position), the log-n temperature of Chiang & Cholak 2022 / Su 2023;
- ``exact_cache=True`` (dynamic, longrope) keeps raw keys in the KV cache and, at every step,
  rotates all of them with the frequencies of the current length. Hugging Face caches keys
  rotated with the frequencies of the step that produced them (transformers issue #25104).
  With one layer, cached decoding then equals a full forward; in deeper models the cached
  keys and values of layers >= 2 still come from hidden states computed at the earlier
  length (as for any length-dependent scaling), so the match is closer but not exact.

Neither add-on exists in Hugging Face's config, so :func:`hf_rope_parameters` refuses them.

Methods that remap positions per region of (query, key) keep the model's RoPE frequencies
and patch the attention of its RoPE layers (definitions and equations in
:mod:`posenc.attention.extension_methods`); the KV cache keeps raw keys, and their
transformers config cannot express them either:

============  ====================================  ==========================================
method        definition                            options (defaults from the factor)
============  ====================================  ==========================================
self_extend   Jin et al. 2024, grouped positions    window, group
rerope        Su 2023, clipped at a window          window
leaky_rerope  Su 2023, slope 1/leak beyond it       window, leak
dual_chunk    An et al. 2024, intra/succ./inter     chunk_size, local_window
streaming     Xiao et al. 2023, sinks + window      sinks, window (the cache evicts the rest)
============  ====================================  ==========================================

They need positions 0..n-1 for every sequence (no padding); per-family details (Gemma 3's
sliding layers, SmolLM3's NoPE layers) are in :mod:`posenc.hf.architectures`.

Length-dependent frequencies (dynamic, longrope) follow the length of the current input,
``max(position_ids) + 1`` (dynamic per token, as Hugging Face; ``schedule="stepped"`` is
posenc's option, which plain transformers cannot save). Hugging Face's dynamic module also
remembers the longest input it has seen and keeps those frequencies for shorter inputs above
the original length; a fresh Hugging Face model and a patched one give the same logits for
any single forward.
"""

from __future__ import annotations

import copy
import math
from dataclasses import asdict, dataclass
from typing import Any

from torch import nn

from ..attention.extension_methods import METHOD_OPTIONS as REGION_OPTIONS
from ..attention.extension_methods import build_method
from ..errors import UserError
from ..encodings import build_encoding
from ..encodings.rope_scaling import LENGTH_DEPENDENT, validate_scaling
from .architectures import SUPPORTED_MODEL_TYPES  # noqa: F401  (re-exported)
from .architectures import (LOCAL, NOPE, ROPE, check_supported, extended_rope, layer_kinds,
                            local_theta, with_extended_rope)
from .patched_attention import evicts, patch_attention, unpatch_attention
from .rotary import ExtendedRotary

#: methods that remap positions per region in patched attention (no Hugging Face rope_type)
REGION_METHODS = tuple(REGION_OPTIONS)
METHODS = ("none", "linear", "ntk", "dynamic", "yarn", "llama3", "longrope", *REGION_METHODS)
#: methods whose factor must exceed 1 (a factor of 1 would change nothing or be invalid)
FACTOR_ABOVE_ONE = frozenset({"linear", "ntk", "yarn", "llama3"})
#: extra keyword options of each method (the Hugging Face key names)
METHOD_OPTIONS: dict[str, tuple[str, ...]] = {
    "none": (), "linear": (), "ntk": (), "dynamic": ("schedule",),
    "yarn": ("beta_fast", "beta_slow", "attention_factor", "mscale", "mscale_all_dim",
             "truncate"),
    "llama3": ("low_freq_factor", "high_freq_factor"),
    "longrope": ("long_factor", "short_factor", "attention_factor"),
    **REGION_OPTIONS,
}
#: what saving each region method for plain transformers would lose
_REGION_LOSS = {
    "self_extend": "grouped positions floor(p / group) beyond the neighbour window",
    "rerope": "relative positions clipped at the window",
    "leaky_rerope": "relative positions compressed by the leak beyond the window",
    "dual_chunk": "intra-, successive- and inter-chunk position indices",
    "streaming": "the sink tokens and the rolling window with positions within the cache",
}
#: documented defaults (Meta's Llama 3.1 release)
#: Hugging Face's own behaviour where posenc's default differs (dynamic NTK per token)
_DEFAULTS = {"llama3": {"low_freq_factor": 1.0, "high_freq_factor": 4.0},
             "dynamic": {"schedule": "per_token"}}
_STATE = "_posenc_extension_state"


@dataclass(frozen=True)
class Extension:
    """What ``extend`` did to a model (also stored in ``config.posenc_extension``)."""

    method: str
    factor: float
    original_max_position_embeddings: int
    theta: float
    head_dim: int
    scaling: dict[str, Any] | None       # the posenc / Hugging Face scaling dict, or None
    logn: bool = False
    exact_cache: bool = False
    attention: dict[str, Any] | None = None   # a region method's resolved options

    @property
    def name(self) -> str:
        """``yarn``, ``yarn+logn``, ``dynamic+exact`` ..."""
        parts = [self.method] if self.method != "none" or not self.logn else []
        parts += ["logn"] if self.logn else []
        parts += ["exact"] if self.exact_cache else []
        return "+".join(parts)

    @property
    def target_length(self) -> int:
        """The context the extension is meant for: original x factor."""
        return round(self.original_max_position_embeddings * self.factor)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class _State:
    extension: Extension
    rotary: nn.Module                    # the model's own rotary module, put back by restore
    config: dict[str, Any]               # config values changed by extend
    attentions: list[nn.Module]


def parse_method(spec: str) -> tuple[str, dict[str, bool]]:
    """``"yarn+logn"`` -> ``("yarn", {"logn": True})``; ``"logn"`` means ``none+logn``;
    ``"dynamic+exact"`` sets ``exact_cache``."""
    if not isinstance(spec, str) or not spec:
        raise UserError(f"method must be a name like 'yarn' or 'ntk+logn', got {spec!r}")
    head, *adds = spec.split("+")
    flags: dict[str, bool] = {}
    if head == "logn":
        head, adds = "none", ["logn", *adds]
    for add in adds:
        if add not in ("logn", "exact"):
            raise UserError(f"unknown add-on {add!r} in method {spec!r}; add-ons: logn, exact")
        flags["logn" if add == "logn" else "exact_cache"] = True
    if head not in METHODS:
        raise UserError(f"unknown method {head!r}; valid methods: {', '.join(METHODS)} "
                         "(add '+logn' for log-n scaling, '+exact' for an exact dynamic cache)")
    return head, flags


def _locate(model: nn.Module) -> tuple[nn.Module, list[nn.Module], Any]:
    """(base model holding ``rotary_emb``, attention modules, config) or a UserError."""
    config = getattr(model, "config", None)
    check_supported(config)
    base = getattr(model, "model", model)
    if not isinstance(getattr(base, "rotary_emb", None), nn.Module):
        raise UserError(f"{type(model).__name__} has no rotary_emb module to patch")
    return base, [layer.self_attn for layer in base.layers], config


def current_extension(model: nn.Module) -> Extension | None:
    """The extension applied to ``model`` by :func:`extend`, or None."""
    state = getattr(model, _STATE, None)
    return state.extension if state is not None else None


def extend(model: nn.Module, method: str, factor: float | None = None,
           original_max_position_embeddings: int | None = None, **options: Any) -> Extension:
    """Extend the context of a Hugging Face Llama-family model in place.

    Args:
        model: a causal LM of a :data:`SUPPORTED_MODEL_TYPES` family (or its base model)
            with unscaled RoPE (``rope_type`` "default").
        method: one of :data:`METHODS`, optionally with ``+logn`` / ``+exact``.
        factor: the context multiplier s (> 1 for linear, ntk, yarn, llama3; >= 1 for dynamic,
            longrope and the region methods, whose default options it sets, None meaning 1;
            none takes no factor).
        original_max_position_embeddings: the pretraining context; defaults to the config's
            ``max_position_embeddings``.
        options: ``logn``, ``exact_cache`` and the method's own keys (:data:`METHOD_OPTIONS`).

    Returns the :class:`Extension`. :func:`restore` undoes it.
    """
    base, attentions, config = _locate(model)
    if current_extension(model) is not None:
        raise UserError(f"model is already extended with {current_extension(model).name!r};"
                         " call posenc.hf.restore(model) first")
    ext = make_extension(config, method, factor, original_max_position_embeddings, **options)
    kinds = layer_kinds(config)
    region = build_method(ext.method, ext.original_max_position_embeddings, ext.factor,
                          **{k: v for k, v in ext.attention.items() if k != "name"}) \
        if ext.attention else None
    if evicts(region) and LOCAL in kinds:
        raise UserError(f"method {region.name!r} needs every layer's cache to evict alike; "
                         f"{config.model_type} has sliding-window layers with their own cache")
    enc = build_encoding("rope", n_heads=config.num_attention_heads, head_dim=ext.head_dim,
                         max_len=ext.original_max_position_embeddings, theta=ext.theta,
                         scaling=ext.scaling,
                         logn_base_len=ext.original_max_position_embeddings if ext.logn
                         else None)
    encs = {None: enc, "full_attention": enc}
    if local_theta(config) is not None:          # Gemma 3's sliding layers: unchanged RoPE
        encs["sliding_attention"] = build_encoding(
            "rope", n_heads=config.num_attention_heads, head_dim=ext.head_dim,
            max_len=ext.original_max_position_embeddings, theta=local_theta(config))
    device = next((b.device for b in base.rotary_emb.buffers()), None)
    state = _State(ext, base.rotary_emb, {"rope_parameters": copy.deepcopy(
        config.rope_parameters), "max_position_embeddings": config.max_position_embeddings},
        [])
    rotary = ExtendedRotary(encs)
    base.rotary_emb = rotary.to(device) if device is not None else rotary
    if ext.logn or ext.exact_cache or region is not None:
        tables: dict = {}             # one cos/sin table per device for all patched layers
        for attn, kind in zip(attentions, kinds):
            if kind == ROPE or (kind == NOPE and evicts(region)):  # NoPE caches evict too
                patch_attention(attn, rotary.encs[None], ext.exact_cache, region,
                                rotary=kind == ROPE, tables=tables)
                state.attentions.append(attn)
    setattr(model, _STATE, state)
    # the config states the rotary part, so save_pretrained writes what transformers can load
    if ext.method != "none":
        params, config.max_position_embeddings = hf_rope_parameters(ext, False)
        config.rope_parameters = with_extended_rope(config, params)
    config.posenc_extension = ext.as_dict()
    return ext


# ``posenc.hf.extend`` names this function (the package re-exports it over the module), so its
# tables ride along: posenc.hf.extend.METHODS, posenc.hf.extend.METHOD_OPTIONS
extend.METHODS, extend.METHOD_OPTIONS = METHODS, METHOD_OPTIONS


def make_extension(config: Any, method: str, factor: float | None = None,
                   original_max_position_embeddings: int | None = None,
                   **options: Any) -> Extension:
    """Validate the arguments of :func:`extend` against a model config."""
    check_supported(config)
    rope = extended_rope(config)
    if rope.get("rope_type", "default") != "default":
        raise UserError(f"model already uses rope_type {rope['rope_type']!r}; extend applies "
                         "to models with plain RoPE (rope_type 'default')")
    method, flags = parse_method(method)
    for key, value in flags.items():
        if options.get(key) is False:
            raise UserError(f"method add-on '+{key}' conflicts with {key}=False")
        options[key] = value
    logn, exact = bool(options.pop("logn", False)), bool(options.pop("exact_cache", False))
    unknown = sorted(set(options) - set(METHOD_OPTIONS[method]))
    if unknown:
        valid = ", ".join(("logn", "exact_cache") + METHOD_OPTIONS[method])
        raise UserError(f"unknown option(s) {', '.join(unknown)} for method {method!r}; "
                         f"valid options: {valid}")
    if method in REGION_METHODS and (logn or exact):
        raise UserError(f"add-ons (+logn, +exact) apply to RoPE scalings, not to {method!r}, "
                         "which already keeps raw keys in its cache")
    if exact and method not in LENGTH_DEPENDENT:
        raise UserError(f"exact_cache applies to length-dependent methods "
                         f"({', '.join(sorted(LENGTH_DEPENDENT))}); {method!r} caches exactly "
                         "as it is")
    if method in REGION_METHODS and factor is None:
        factor = 1.0                 # defaults then keep relative positions as pretrained
    if method == "none":
        if factor not in (None, 1, 1.0):
            raise UserError(f"method 'none' takes no factor, got factor={factor!r}")
        factor = 1.0
    elif factor is None:
        raise UserError(f"method {method!r} needs a factor (the context multiplier)")
    elif isinstance(factor, bool) or not isinstance(factor, (int, float)) \
            or not math.isfinite(factor):
        raise UserError(f"factor must be a number, got {factor!r}")
    elif method in FACTOR_ABOVE_ONE and factor <= 1:
        raise UserError(f"method {method!r} needs factor > 1, got {factor!r}")
    elif factor < 1:
        raise UserError(f"method {method!r} needs factor >= 1, got {factor!r}")
    original = original_max_position_embeddings
    if original is None:
        original = getattr(config, "max_position_embeddings", None)
        if original is None and (method != "none" or logn):
            raise UserError(f"method {method!r} needs original_max_position_embeddings (the "
                             "pretraining context length); the model config has none")
    if original is not None and (isinstance(original, bool) or not isinstance(original, int)
                                 or original < 2):
        raise UserError(f"original_max_position_embeddings must be an integer >= 2, got "
                         f"{original!r}")
    head_dim = getattr(config, "head_dim", None) or \
        config.hidden_size // config.num_attention_heads
    theta = float(rope.get("rope_theta", 10000.0))
    scaling = attention = None
    if method in REGION_METHODS:
        region = build_method(method, int(original), float(factor), **options)
        attention = {k: v for k, v in asdict(region).items()}
        attention["name"] = method
    elif method != "none":
        scaling = {"rope_type": method, "factor": float(factor), **_DEFAULTS.get(method, {}),
                   **options}
        if method in ("dynamic", "yarn", "llama3", "longrope"):
            scaling["original_max_position_embeddings"] = original
        if method == "longrope" and ("long_factor" not in options
                                     or "short_factor" not in options):
            raise UserError(f"method 'longrope' needs long_factor and short_factor, lists of "
                             f"head_dim/2 = {head_dim // 2} positive numbers (found by the "
                             "LongRoPE search)")
        scaling = validate_scaling(scaling, rotary_dim=head_dim)
    return Extension(method, float(factor), int(original or 0), theta, head_dim, scaling,
                     logn, exact, attention)


def hf_rope_parameters(ext: Extension, strict: bool = True) -> tuple[dict[str, Any], int]:
    """(``rope_parameters``, ``max_position_embeddings``) that make plain transformers
    compute the same frequencies as ``ext``.

    With ``strict`` (the default) add-ons that Hugging Face cannot express raise a UserError
    naming the method; otherwise only the rotary part is returned.
    """
    if strict and ext.method in REGION_METHODS:
        raise UserError(f"method {ext.name!r} cannot be saved for plain transformers: its "
                         f"config cannot express {_REGION_LOSS[ext.method]}; keep the model "
                         "patched with posenc.hf.extend")
    if strict and (ext.logn or ext.exact_cache):
        what = "log-n query scaling" if ext.logn else "an exact cache (it keeps keys " \
            "rotated at the length they were cached at)"
        raise UserError(f"method {ext.name!r} cannot be saved for plain transformers: its "
                         f"config cannot express {what}; save without the add-on or keep the "
                         "model patched with posenc.hf.extend")
    original = ext.original_max_position_embeddings
    if ext.method == "none" or ext.method in REGION_METHODS:
        return {"rope_type": "default", "rope_theta": ext.theta}, original
    if ext.method == "ntk":
        # static NTK-aware scaling is plain RoPE with a larger base
        d = ext.head_dim
        return {"rope_type": "default",
                "rope_theta": ext.theta * ext.factor ** (d / (d - 2))}, ext.target_length
    params = {**ext.scaling, "rope_theta": ext.theta}
    if ext.method == "dynamic":
        if strict and params.get("schedule") == "stepped":
            raise UserError("method 'dynamic' with schedule='stepped' cannot be saved for "
                             "plain transformers, whose dynamic NTK follows every token")
        params.pop("schedule", None)
        # Hugging Face's dynamic NTK reads the original length from max_position_embeddings
        params.pop("original_max_position_embeddings")
        return params, original
    return params, ext.target_length


def restore(model: nn.Module) -> None:
    """Undo :func:`extend`: the model's own rotary module, attention and config come back."""
    state = getattr(model, _STATE, None)
    if state is None:
        raise UserError("model is not extended (nothing to restore)")
    base, _, config = _locate(model)
    base.rotary_emb = state.rotary
    for attn in state.attentions:
        unpatch_attention(attn)
    for key, value in state.config.items():
        setattr(config, key, value)
    if hasattr(config, "posenc_extension"):
        del config.posenc_extension
    delattr(model, _STATE)
