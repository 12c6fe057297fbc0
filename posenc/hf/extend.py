"""Context extension of Hugging Face causal LMs with RoPE, by patching one model in place.

``extend(model, "yarn", 2.0)`` applies a method of the registry :mod:`posenc.methods` (``posenc
list`` prints it: each method's options, defaults, source and whether a Hugging Face config or
a GGUF file can hold it), named in the one spec grammar (:mod:`posenc.methods.spec`:
``yarn``, ``yarn:2``, ``ntk+logn``, ``dynamic+exact``, ``self_extend``):

- a **frequency** method replaces the model's rotary embedding module with one that takes its
  frequencies from posenc's pure functions
  (:func:`posenc.encodings.rope_scaling.compute_inv_freq` through a posenc ``rope`` encoding),
  so every method goes through one code path, and is saved as Hugging Face's ``rope_type`` of
  the same name (static NTK as ``default`` with ``rope_theta`` raised);
- the add-on ``logn`` multiplies each query by ``max(1, log(p + 1) / log(original))`` (p = its
  position), the log-n temperature of Chiang & Cholak 2022 / Su 2023;
- the add-on ``exact`` (``exact_cache=True``; dynamic, longrope) keeps raw keys in the KV cache
  and, at every step, rotates all of them with the frequencies of the current length. Hugging
  Face caches keys rotated with the frequencies of the step that produced them (transformers
  issue #25104). With one layer, cached decoding then equals a full forward; in deeper models
  the cached keys and values of layers >= 2 still come from hidden states computed at the
  earlier length (as for any length-dependent scaling), so the match is closer but not exact;
- a **region** method (Self-Extend, ReRoPE, Dual Chunk, StreamingLLM, ...) keeps the model's
  RoPE frequencies and remaps positions per region of (query, key) in the attention of its
  RoPE layers (:mod:`posenc.hf.patched_attention`); the KV cache keeps raw keys;
- a **structural** method (DroPE) removes the rotary of every layer (:class:`NoRotary`: cos 1,
  sin 0); the model then wants :func:`posenc.hf.recalibrate` at the original length.

DeepSeek-V3-family models (multi-head latent attention) take the frequency methods on their
rotary slice, YaRN with DeepSeek's ``mscale`` / ``mscale_all_dim`` (the latter squared on each
attention's softmax scale, as transformers does), the region methods and DroPE.

Neither add-ons nor region methods exist in Hugging Face's config, so :func:`hf_rope_parameters`
refuses them (each method declares what saving it would lose). Region methods need positions
0..n-1 for every sequence (no padding); per-family details (Gemma 3's sliding layers, SmolLM3's
NoPE layers) are in :mod:`posenc.hf.architectures`.

Length-dependent frequencies (dynamic, longrope) follow the length of the current input,
``max(position_ids) + 1`` (dynamic per token, as Hugging Face; ``schedule="stepped"`` is
posenc's option, which plain transformers cannot save). Hugging Face's dynamic module also
remembers the longest input it has seen and keeps those frequencies for shorter inputs above
the original length; a fresh Hugging Face model and a patched one give the same logits for
any single forward.
"""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass, field
from typing import Any

from torch import nn

from ..encodings import build_encoding
from ..errors import UserError
from ..methods import build_method, method_class, parse_method_spec
from .architectures import (
    LATENT_ATTENTION,
    LOCAL,
    NOPE,
    ROPE,
    SUPPORTED_MODEL_TYPES,  # noqa: F401  (re-exported)
    check_supported,
    extended_rope,
    layer_kinds,
    local_theta,
    softmax_scale_factor,
    with_extended_rope,
)
from .patched_attention import patch_attention, unpatch_attention
from .rotary import ExtendedRotary, NoRotary


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
    #: the model's own context (its config's max_position_embeddings before extend): an
    #: export keeps at least this much, even when ``original`` is set lower for a test
    native_max_position_embeddings: int | None = None

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

    @property
    def context_length(self) -> int:
        """The context an exported model declares: the larger of the model's own and the
        extended one (a lower ``original`` set for a test never shrinks the model)."""
        return max(self.target_length, self.native_max_position_embeddings or 0)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class _State:
    """What :func:`restore` needs, held by the :class:`ExtendedRotary` that ``extend`` puts in
    place (nothing is stored on transformers' own objects)."""

    extension: Extension
    rotary: nn.Module                    # the model's own rotary module, put back by restore
    config: dict[str, Any]               # config values changed by extend
    attentions: list[nn.Module]
    #: (attention module, its own softmax scale) where extend changed the scale (DeepSeek)
    scales: list[tuple[nn.Module, float]] = field(default_factory=list)


def _locate(model: nn.Module) -> tuple[nn.Module, list[nn.Module], Any]:
    """(base model holding ``rotary_emb``, attention modules, config) or a UserError."""
    config = getattr(model, "config", None)
    check_supported(config)
    base = getattr(model, "model", model)
    if not isinstance(getattr(base, "rotary_emb", None), nn.Module):
        raise UserError(f"{type(model).__name__} has no rotary_emb module to patch")
    return base, [layer.self_attn for layer in base.layers], config


def _state(model: nn.Module) -> _State | None:
    base = getattr(model, "model", model)
    rotary = getattr(base, "rotary_emb", None)
    return rotary.extension_state if isinstance(rotary, ExtendedRotary) else None


def current_extension(model: nn.Module) -> Extension | None:
    """The extension applied to ``model`` by :func:`extend`, or None."""
    state = _state(model)
    return state.extension if state is not None else None


def extend(model: nn.Module, method: str, factor: float | None = None,
           original_max_position_embeddings: int | None = None, **options: Any) -> Extension:
    """Extend the context of a Hugging Face Llama-family model in place.

    Args:
        model: a causal LM of a :data:`SUPPORTED_MODEL_TYPES` family (or its base model)
            with unscaled RoPE (``rope_type`` "default").
        method: a method spec (:mod:`posenc.methods.spec`): a registered method, optionally
            with its factor (``yarn:2``) and ``+logn`` / ``+exact``.
        factor: the context multiplier s (> 1 for linear, ntk, yarn, llama3; >= 1 for dynamic,
            longrope and the region methods, whose default options it sets, None meaning 1;
            none takes no factor). A factor in the spec is the same as this argument.
        original_max_position_embeddings: the pretraining context; defaults to the config's
            ``max_position_embeddings``.
        options: ``logn``, ``exact_cache`` and the method's own options (``posenc list``).

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
        if ext.attention is not None and method_class(ext.method).kind == "region" else None
    evicts = region is not None and region.evicts
    if evicts and LOCAL in kinds:
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
    rotary = NoRotary(ext.head_dim) if method_class(ext.method).kind == "structural" \
        else ExtendedRotary(encs)
    scale = softmax_scale_factor(config, ext.scaling)
    if scale != 1.0:
        for attn in attentions:
            state.scales.append((attn, attn.scaling))
            attn.scaling = attn.scaling * scale
    if ext.logn or ext.exact_cache or region is not None:
        tables: dict = {}             # one cos/sin table per device for all patched layers
        for attn, kind in zip(attentions, kinds):
            if kind == ROPE or (kind == NOPE and evicts):  # NoPE caches evict too
                patch_attention(attn, rotary.encs[None], ext.exact_cache, region,
                                rotary=kind == ROPE, tables=tables)
                state.attentions.append(attn)
    rotary.extension_state = state
    base.rotary_emb = rotary.to(device) if device is not None else rotary
    # the config states the rotary part, so save_pretrained writes what transformers can load
    if ext.method != "none":
        params, config.max_position_embeddings = hf_rope_parameters(ext, False)
        config.rope_parameters = with_extended_rope(config, params)
    config.posenc_extension = ext.as_dict()
    return ext


def make_extension(config: Any, method: str, factor: float | None = None,
                   original_max_position_embeddings: int | None = None,
                   **options: Any) -> Extension:
    """Validate the arguments of :func:`extend` against a model config."""
    check_supported(config)
    rope = extended_rope(config)
    if rope.get("rope_type", "default") != "default":
        raise UserError(f"model already uses rope_type {rope['rope_type']!r}; extend applies "
                         "to models with plain RoPE (rope_type 'default')")
    spec = parse_method_spec(method)
    if spec.factor is not None:
        if factor is not None and float(factor) != spec.factor:
            raise UserError(f"method {method!r} gives factor {spec.factor:g} and the call "
                            f"factor={factor!r}; give it once")
        factor = spec.factor
    for key, value in spec.flags().items():
        if options.get(key) is False:
            raise UserError(f"method add-on '+{key}' conflicts with {key}=False")
        options[key] = value
    logn, exact = bool(options.pop("logn", False)), bool(options.pop("exact_cache", False))
    cls = method_class(spec.name)
    if cls.kind in ("region", "structural") and (logn or exact):
        raise UserError(f"add-ons (+logn, +exact) apply to RoPE scalings, not to "
                        f"{spec.name!r}")
    if config.model_type in LATENT_ATTENTION and (logn or exact):
        raise UserError(f"add-ons (+logn, +exact) are not available for {config.model_type}'s "
                        "latent attention; use a frequency or region method alone")
    if exact and not (cls.kind == "frequency" and cls.length_dependent()):
        raise UserError(f"exact_cache applies to methods whose frequencies follow the length "
                        f"(dynamic, longrope); {spec.name!r} caches exactly as it is")
    factor = cls.check_factor(factor)
    original = original_max_position_embeddings
    if original is None:
        original = getattr(config, "max_position_embeddings", None)
        if original is None and (spec.name != "none" or logn):
            raise UserError(f"method {spec.name!r} needs original_max_position_embeddings "
                            "(the pretraining context length); the model config has none")
    if original is not None and (isinstance(original, bool) or not isinstance(original, int)
                                 or original < 2):
        raise UserError(f"original_max_position_embeddings must be an integer >= 2, got "
                         f"{original!r}")
    head_dim = getattr(config, "head_dim", None) or \
        config.hidden_size // config.num_attention_heads
    theta = float(rope.get("rope_theta", 10000.0))
    resolved = cls.resolve_options(int(original or 0), factor, options, hf=True)
    scaling = attention = None
    if cls.kind == "region":
        attention = {**build_method(spec.name, int(original), factor, **resolved).settings(),
                     "name": spec.name}
    elif cls.kind == "frequency":
        scaling = cls.rope_scaling(int(original), factor, resolved, rotary_dim=head_dim)
    elif cls.kind == "structural":        # its recalibration budget, as resolved
        attention = {**resolved, "name": spec.name}
    native = getattr(config, "max_position_embeddings", None)
    return Extension(spec.name, factor, int(original or 0), theta, head_dim, scaling,
                     logn, exact, attention, native if isinstance(native, int) else None)


def hf_rope_parameters(ext: Extension, strict: bool = True) -> tuple[dict[str, Any], int]:
    """(``rope_parameters``, ``max_position_embeddings``) that make plain transformers
    compute the same frequencies as ``ext``.

    With ``strict`` (the default) what Hugging Face cannot express (a region method, an
    add-on) raises a UserError naming what would be lost; otherwise only the rotary part is
    returned.
    """
    cls = method_class(ext.method)
    if strict and cls.hf_config_loss is not None:
        raise UserError(f"method {ext.name!r} cannot be saved for plain transformers: its "
                         f"config cannot express {cls.hf_config_loss}; keep the model "
                         "patched with posenc.hf.extend")
    if strict and (ext.logn or ext.exact_cache):
        what = method_class("logn").hf_config_loss if ext.logn else "an exact cache (it " \
            "keeps keys rotated at the length they were cached at)"
        raise UserError(f"method {ext.name!r} cannot be saved for plain transformers: its "
                         f"config cannot express {what}; save without the add-on or keep the "
                         "model patched with posenc.hf.extend")
    original = ext.original_max_position_embeddings
    if ext.scaling is None:
        return ({"rope_type": "default", "rope_theta": ext.theta},
                max(original, ext.native_max_position_embeddings or 0))
    if ext.method == "ntk":
        # static NTK-aware scaling is plain RoPE with a larger base
        d = ext.head_dim
        return {"rope_type": "default",
                "rope_theta": ext.theta * ext.factor ** (d / (d - 2))}, ext.context_length
    params = {**ext.scaling, "rope_theta": ext.theta}
    if ext.method == "dynamic":
        if strict and params.get("schedule") == "stepped":
            raise UserError("method 'dynamic' with schedule='stepped' cannot be saved for "
                             "plain transformers, whose dynamic NTK follows every token")
        if strict and original < (ext.native_max_position_embeddings or 0):
            raise UserError(f"method 'dynamic' with original length {original} below the "
                            f"model's context ({ext.native_max_position_embeddings}) cannot "
                            "be saved for plain transformers, whose dynamic NTK reads the "
                            "original length from max_position_embeddings")
        params.pop("schedule", None)
        # Hugging Face's dynamic NTK reads the original length from max_position_embeddings
        params.pop("original_max_position_embeddings")
        return params, original
    return params, ext.context_length


def restore(model: nn.Module) -> None:
    """Undo :func:`extend`: the model's own rotary module, attention and config come back
    (weights a recalibration changed stay as they are)."""
    state = _state(model)
    if state is None:
        raise UserError("model is not extended (nothing to restore)")
    base, _, config = _locate(model)
    base.rotary_emb = state.rotary
    for attn in state.attentions:
        unpatch_attention(attn)
    for attn, scaling in state.scales:
        attn.scaling = scaling
    for key, value in state.config.items():
        setattr(config, key, value)
    if hasattr(config, "posenc_extension"):
        del config.posenc_extension
