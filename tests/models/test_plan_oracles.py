"""Named plans against the transformers models they copy: SmolLM3, Gemma 3 and Llama 4
configs and tiny models (per-layer RoPE/NoPE, windows, thetas), and one Gemma 3 sliding and
one Llama 4 chunked layer's attention on random inputs."""

import torch

from posenc.attention.masks import Window
from posenc.models.lm import LMConfig, TransformerLM
from posenc.models.plans import resolve_plan


def _lm(**options) -> TransformerLM:
    torch.manual_seed(0)
    defaults = {"vocab_size": 40, "d_model": 32, "max_len": 32, "n_heads": 2}
    return TransformerLM(LMConfig(**{**defaults, **options})).eval()


def test_smollm3_plan_matches_transformers():
    from transformers import SmolLM3Config
    hf = SmolLM3Config(num_hidden_layers=10)
    specs = resolve_plan("smollm3", n_layers=10, max_len=64, pe="rope", pe_options={})
    assert [int(s.pe == "rope") for s in specs] == hf.no_rope_layers
    assert {s.pe for s in specs} == {"rope", "nope"} and all(s.window is None for s in specs)


def test_gemma3_plan_matches_transformers():
    from transformers import Gemma3TextConfig
    hf = Gemma3TextConfig(num_hidden_layers=13, sliding_window=16)
    specs = resolve_plan({"name": "gemma3", "window": 16}, n_layers=13, max_len=64,
                         pe="rope", pe_options={})
    kinds = ["sliding_attention" if s.window else "full_attention" for s in specs]
    assert kinds == hf.layer_types
    for spec, kind in zip(specs, hf.layer_types):
        assert spec.pe == "rope"
        assert spec.pe_options["theta"] == hf.rope_parameters[kind]["rope_theta"]
        if spec.window is not None:
            assert spec.window == Window("sliding", hf.sliding_window)


def test_llama4_plan_matches_transformers():
    from transformers import Llama4TextConfig
    hf = Llama4TextConfig(num_hidden_layers=9, attention_chunk_size=8)
    specs = resolve_plan({"name": "llama4", "chunk": 8}, n_layers=9, max_len=64, pe="rope",
                         pe_options={})
    assert [int(s.pe == "rope") for s in specs] == hf.no_rope_layers
    kinds = ["chunked_attention" if s.window else "full_attention" for s in specs]
    assert kinds == hf.layer_types
    assert all(s.window == Window("chunked", hf.attention_chunk_size)
               for s in specs if s.window is not None)


def test_plans_match_tiny_transformers_models_layer_by_layer():
    """Tiny SmolLM3 and Gemma 3 text models built from their configs: which layers rotate,
    which slide and by how much, and each layer type's rotary frequencies, as posenc's
    models under the named plans."""
    from transformers import Gemma3TextConfig, Gemma3TextModel, SmolLM3Config, SmolLM3Model
    small = dict(hidden_size=32, intermediate_size=64, num_attention_heads=2,
                 num_key_value_heads=2, vocab_size=40, max_position_embeddings=64,
                 pad_token_id=0, bos_token_id=1, eos_token_id=2)
    smol = SmolLM3Model(SmolLM3Config(num_hidden_layers=8, **small))
    ours = _lm(n_layers=8, plan="smollm3")
    assert [bool(layer.self_attn.use_rope) for layer in smol.layers] == \
        [block.layer_pe.name == "rope" for block in ours.blocks]
    gemma = Gemma3TextModel(Gemma3TextConfig(num_hidden_layers=7, sliding_window=6,
                                             head_dim=16, **small))
    ours = _lm(n_layers=7, plan={"name": "gemma3", "window": 6})
    assert [layer.self_attn.sliding_window for layer in gemma.layers] == \
        [None if block.attn.window is None else block.attn.window.size
         for block in ours.blocks]
    for layer, block in zip(gemma.layers, ours.blocks):
        theirs = getattr(gemma.rotary_emb, f"{layer.self_attn.layer_type}_inv_freq")
        torch.testing.assert_close(block.layer_pe.inv_freq, theirs)


def test_gemma3_sliding_layer_attention_equals_transformers():
    """One Gemma 3 sliding layer's attention (its rotary at theta 10k, its sliding mask, its
    eager attention) on random q, k, v equals posenc's rope layer with the window."""
    from transformers import Gemma3TextConfig
    from transformers.masking_utils import sliding_window_causal_mask_function
    from transformers.models.gemma3.modeling_gemma3 import (
        Gemma3RotaryEmbedding,
        apply_rotary_pos_emb,
    )

    from posenc.attention import AttentionCall, Masks, attend
    n, window, heads, dim = 12, 4, 2, 16
    hf = Gemma3TextConfig(num_hidden_layers=6, sliding_window=window, head_dim=dim,
                          hidden_size=heads * dim, num_attention_heads=heads,
                          num_key_value_heads=heads, query_pre_attn_scalar=dim)
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, heads, n, dim) for _ in range(3))
    pos = torch.arange(n)
    cos, sin = Gemma3RotaryEmbedding(hf)(v, pos[None], layer_type="sliding_attention")
    q_rot, k_rot = apply_rotary_pos_emb(q, k, cos, sin)
    idx = torch.arange(n)
    visible = sliding_window_causal_mask_function(window)(0, 0, idx[:, None], idx[None, :])
    logits = q_rot @ k_rot.transpose(-1, -2) * dim ** -0.5
    theirs = logits.masked_fill(~visible, float("-inf")).softmax(-1) @ v

    model = _lm(n_layers=6, d_model=heads * dim, plan={"name": "gemma3", "window": window})
    layer = model.blocks[0]
    pe = layer.layer_pe
    masks = Masks(window=layer.attn.window, q_pos=pos, k_pos=pos)
    for backend in ("eager", "sdpa", "flex"):
        call = AttentionCall.for_positions(pos, pos, causal=True, backend=backend, masks=masks)
        at = call.at
        q2, k2 = pe.transform_qk(q, k, at)
        ours, _ = attend(q2, k2, v, pe, call)
        torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)


def test_llama4_chunked_layer_attention_equals_transformers():
    """One Llama 4 chunked RoPE layer's attention (its interleaved rotary at theta 500k, its
    chunked mask with left padding, eager attention) equals posenc's rope layer under the
    llama4 plan on the real tokens of a left-padded batch."""
    from transformers import Llama4TextConfig
    from transformers.masking_utils import chunked_causal_mask_function
    from transformers.models.llama4.modeling_llama4 import (
        Llama4TextRotaryEmbedding,
        apply_rotary_emb,
    )

    from posenc.attention import AttentionCall, Masks, attend
    from posenc.models.positions import positions_from_mask
    n, chunk, heads, dim, theta = 11, 4, 2, 16, 500_000.0
    hf = Llama4TextConfig(num_hidden_layers=4, attention_chunk_size=chunk, head_dim=dim,
                          hidden_size=heads * dim, num_attention_heads=heads,
                          num_key_value_heads=heads, rope_parameters={
                              "rope_type": "default", "rope_theta": theta})
    pads = torch.tensor([0, 3])
    valid = torch.arange(n)[None, :] >= pads[:, None]
    pos = positions_from_mask(valid, torch.zeros(2, dtype=torch.long))        # (B, n)
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, heads, n, dim) for _ in range(3))
    freqs = Llama4TextRotaryEmbedding(hf)(v, pos)
    q_rot, k_rot = (t.transpose(1, 2) for t in apply_rotary_emb(
        q.transpose(1, 2), k.transpose(1, 2), freqs))
    idx = torch.arange(n)
    visible = chunked_causal_mask_function(chunk, pads)(
        torch.arange(2)[:, None, None, None], 0, idx[None, None, :, None],
        idx[None, None, None, :]) & valid[:, None, None, :]
    logits = q_rot @ k_rot.transpose(-1, -2) * dim ** -0.5
    theirs = logits.masked_fill(~visible, float("-inf")).softmax(-1) @ v

    model = _lm(n_layers=4, d_model=heads * dim, plan={"name": "llama4", "chunk": chunk},
                pe_options={"layout": "interleaved", "theta": theta})
    assert [block.layer_pe.name for block in model.blocks] == \
        ["rope" if use else "nope" for use in hf.no_rope_layers]
    layer = model.blocks[0]
    masks = Masks(key_valid=valid, window=layer.attn.window, q_pos=pos, k_pos=pos)
    for backend in ("eager", "sdpa", "flex"):
        call = AttentionCall.for_positions(pos, pos, causal=True, backend=backend, masks=masks)
        q2, k2 = layer.layer_pe.transform_qk(q, k, call.at)
        ours, _ = attend(q2, k2, v, layer.layer_pe, call)
        for row, pad in enumerate(pads.tolist()):
            torch.testing.assert_close(ours[row, :, pad:], theirs[row, :, pad:], atol=1e-5,
                                       rtol=1e-5)
