"""What :func:`posenc.hf.extend.extend` needs to know about each Hugging Face model family.

=============  ==============================================================================
model type     what differs from Llama
=============  ==============================================================================
llama          (the reference layout: q/k/v/o projections, one ``rotary_emb``)
mistral        a sliding window (None in most checkpoints)
qwen2          biases on q/k/v, a sliding window
qwen3          q_norm / k_norm (RMSNorm per head) before RoPE
gemma3_text    two thetas: sliding layers use ``rope_parameters["sliding_attention"]`` (the
               local base frequency, 10 000) and a window; full layers
               ``rope_parameters["full_attention"]``. Extension applies to full layers only,
               as Gemma 3's released configs scale only the global layers' RoPE
smollm3       NoPE layers (``no_rope_layers[i] == 0``): extension applies to RoPE layers
phi3           one fused ``qkv_proj``; LongRoPE checkpoints (Phi-3 128k)
deepseek_v3    multi-head latent attention (DeepSeek-AI 2024, DeepSeek-V2, Sec. 2.1.3): RoPE on
               a ``qk_rope_head_dim`` slice of each head whose key is shared by all heads
               (``config.head_dim`` is that slice), a compressed KV latent in the cache, and
               YaRN's ``mscale_all_dim`` squared on the softmax scale
               (:func:`softmax_scale_factor`)
=============  ==============================================================================
"""

from __future__ import annotations

from typing import Any

from ..errors import UserError

SUPPORTED_MODEL_TYPES = ("llama", "mistral", "qwen2", "qwen3", "gemma3_text", "smollm3",
                         "phi3", "deepseek_v3")
#: families with multi-head latent attention (a rotary slice shared by the heads)
LATENT_ATTENTION = ("deepseek_v3",)
#: families whose rope_parameters hold one dict per layer type
_PER_LAYER_TYPE = {"gemma3_text": "full_attention"}

#: what each layer's attention does with positions
ROPE, NOPE, LOCAL = "rope", "nope", "local"


def check_supported(config: Any) -> None:
    """UserError unless ``config`` is a supported model type with plain full RoPE."""
    kind = getattr(config, "model_type", None)
    if config is None or kind is None:
        raise UserError(f"expected a Hugging Face causal LM with a config, got "
                         f"{type(config).__name__}")
    rope = getattr(config, "rope_parameters", None)
    if not rope:
        raise UserError(f"model type {kind!r} has no rotary position embedding (RoPE) to "
                         f"extend; supported model types: {', '.join(SUPPORTED_MODEL_TYPES)} "
                         "(and models built on them, such as SmolLM)")
    if kind not in SUPPORTED_MODEL_TYPES:
        hint = " (load the text model, Gemma3ForCausalLM)" if kind == "gemma3" else ""
        raise UserError(f"model type {kind!r} is not supported{hint}; supported model types: "
                         f"{', '.join(SUPPORTED_MODEL_TYPES)}")
    if extended_rope(config).get("partial_rotary_factor", 1.0) != 1.0:
        raise UserError("partial rotary embeddings (partial_rotary_factor != 1) are not "
                         "supported")


def extended_rope(config: Any) -> dict[str, Any]:
    """The rope_parameters of the layers extension applies to."""
    key = _PER_LAYER_TYPE.get(config.model_type)
    return config.rope_parameters[key] if key else config.rope_parameters


def with_extended_rope(config: Any, params: dict[str, Any]) -> dict[str, Any]:
    """The config's ``rope_parameters`` with the extended layers' part set to ``params``
    (keys that are not about scaling, such as Phi-3's partial_rotary_factor, stay)."""
    kept = {k: v for k, v in extended_rope(config).items() if k in _KEPT_KEYS}
    key = _PER_LAYER_TYPE.get(config.model_type)
    if key is None:
        return {**kept, **params}
    return {**config.rope_parameters, key: {**kept, **params}}


_KEPT_KEYS = ("partial_rotary_factor",)


def softmax_scale_factor(config: Any, scaling: dict[str, Any] | None) -> float:
    """What a family multiplies its attention's softmax scale by under ``scaling``: for
    DeepSeek's YaRN, ``yarn_mscale(factor, mscale_all_dim) ** 2`` (transformers'
    ``yarn_apply_mscale``, after DeepSeek-V2's released code); 1 otherwise."""
    from ..encodings.rope_scaling import softmax_mscale
    return softmax_mscale(scaling) if config.model_type in LATENT_ATTENTION else 1.0


def local_theta(config: Any) -> float | None:
    """Gemma 3's sliding layers' theta (their RoPE is left unchanged), else None."""
    if config.model_type != "gemma3_text":
        return None
    return float(config.rope_parameters["sliding_attention"]["rope_theta"])


def layer_kinds(config: Any) -> list[str]:
    """ROPE (extended), NOPE (no rotary) or LOCAL (Gemma 3 sliding) per layer."""
    n = config.num_hidden_layers
    if config.model_type == "smollm3":
        return [ROPE if use else NOPE for use in config.no_rope_layers[:n]]
    if config.model_type == "gemma3_text":
        return [LOCAL if t == "sliding_attention" else ROPE for t in config.layer_types[:n]]
    return [ROPE] * n


#: rope types a family's config class accepts when loaded (others fail its validation)
_LOADABLE_ROPE_TYPES = {"phi3": ("default", "longrope")}


def check_loadable(config: Any) -> None:
    """UserError if plain transformers would refuse this config's extended rope type."""
    allowed = _LOADABLE_ROPE_TYPES.get(config.model_type)
    rope_type = extended_rope(config).get("rope_type", "default")
    if allowed and rope_type not in allowed:
        raise UserError(f"a saved {config.model_type} model cannot use rope_type "
                         f"{rope_type!r}: its config class accepts only "
                         f"{', '.join(allowed)} (extend with longrope or ntk to save it)")
