"""Tiny random Hugging Face models for the posenc.hf tests (and ``posenc extend``'s): configs
of Llama, Mistral, Qwen2, Qwen3, Gemma 3, SmolLM3 and Phi-3 with a short original context,
weights that make attention peaked, logits without a cache, and a byte-level BPE tokenizer.

The test modules skip themselves when transformers is not installed.
"""

from __future__ import annotations

from pathlib import Path

import torch

try:
    import transformers
except ImportError:
    transformers = None

ORIG, VOCAB, T = 32, 97, 80     # original context, vocabulary, test length (2.5x)


#: per family: config class name and what makes the tiny model exercise its differences
_FAMILIES = {
    "llama": ("LlamaConfig", {}),
    "mistral": ("MistralConfig", {"sliding_window": None}),
    "qwen2": ("Qwen2Config", {"sliding_window": None}),
    "qwen3": ("Qwen3Config", {"head_dim": 16}),
    # a sliding layer (local theta 10 000, window 8) before a full one (theta 1e6)
    "gemma3_text": ("Gemma3TextConfig", {"head_dim": 16, "sliding_window": 8,
                                         "query_pre_attn_scalar": 16}),
    # the last of every two layers has no RoPE
    "smollm3": ("SmolLM3Config", {"pad_token_id": None, "bos_token_id": None,
                                  "eos_token_id": None}),
    "phi3": ("Phi3Config", {"original_max_position_embeddings": ORIG, "pad_token_id": None,
                            "bos_token_id": None, "eos_token_id": None}),
}


def tiny_config(kind: str = "llama", layers: int = 2, **kw):
    name, extra = _FAMILIES[kind]
    extra = dict(extra)
    if kind == "gemma3_text":
        extra["layer_types"] = (["sliding_attention", "full_attention"] * layers)[:layers]
    if kind == "smollm3":
        extra["no_rope_layers"] = ([1, 0] * layers)[:layers]
    return getattr(transformers, name)(
        hidden_size=64, intermediate_size=96, num_hidden_layers=layers,
        num_attention_heads=4, num_key_value_heads=2, vocab_size=VOCAB,
        max_position_embeddings=ORIG, attn_implementation="sdpa", **{**extra, **kw})


def peaked_model(config):
    """A model with peaked attention (std 0.02 init would make positions barely matter)."""
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen) * 0.25
            p.copy_(1.0 + 0.1 * noise if p.dim() == 1 else noise)
    return model


def logits_of(model, ids):
    with torch.no_grad():
        return model(input_ids=ids, use_cache=False).logits


def byte_bpe_tokenizer():
    from tokenizers import ByteLevelBPETokenizer
    bpe = ByteLevelBPETokenizer()
    text = Path(torch.__file__).read_text() * 3
    bpe.train_from_iterator([text], vocab_size=300, min_frequency=2,
                            special_tokens=["<s>", "</s>"], show_progress=False)
    return transformers.PreTrainedTokenizerFast(tokenizer_object=bpe._tokenizer,
                                                bos_token="<s>", eos_token="</s>")


def save_tiny_model(path: Path, native: int = 128) -> Path:
    """A tiny peaked Llama (native context ``native``) with the byte-level BPE tokenizer,
    saved to ``path`` as a Hugging Face model directory; a text to score beside it in
    ``path.parent / "data.txt"``."""
    import json

    tok = byte_bpe_tokenizer()
    config = tiny_config()
    config.vocab_size, config.max_position_embeddings = len(tok), native
    peaked_model(config).save_pretrained(path)
    tok.save_pretrained(path)
    (path.parent / "data.txt").write_text(Path(json.__file__).read_text() * 2)
    return path


def without(obj, keys):
    """``obj`` (nested dicts and lists) without the dict entries named in ``keys``: what
    differs between two runs of the same study (time, memory)."""
    if isinstance(obj, dict):
        return {k: without(v, keys) for k, v in obj.items() if k not in keys}
    if isinstance(obj, list):
        return [without(v, keys) for v in obj]
    return obj
