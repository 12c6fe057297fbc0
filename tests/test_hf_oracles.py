"""Oracle tests against Hugging Face transformers (skipped when it is not installed).

- every RoPE scaling type both libraries have: ``compute_inv_freq`` vs ``ROPE_INIT_FUNCTIONS``;
- T5's ``_relative_position_bucket``; BLOOM's ALiBi slopes;
- a tiny random Llama whose weights are copied into a posenc ``TransformerLM``: same logits,
  with plain RoPE and with scalings set in both.
"""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

transformers = pytest.importorskip("transformers")

from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS  # noqa: E402

from posenc import LMConfig, TransformerLM  # noqa: E402
from posenc.encodings.alibi import alibi_slopes  # noqa: E402
from posenc.encodings.rope_scaling import compute_inv_freq  # noqa: E402
from posenc.encodings.t5 import relative_position_bucket  # noqa: E402

pytestmark = pytest.mark.usefixtures("single_thread")

HEAD_DIM, N_HEADS, ORIG = 16, 4, 64
SHORT = [1.0 + 0.05 * i for i in range(HEAD_DIM // 2)]
LONG = [1.0 + 1.5 * i for i in range(HEAD_DIM // 2)]


def _llama_config(rope: dict, *, max_position_embeddings: int = 4 * ORIG, **kw) -> LlamaConfig:
    defaults = dict(hidden_size=HEAD_DIM * N_HEADS, num_attention_heads=N_HEADS,
                    num_key_value_heads=N_HEADS, num_hidden_layers=1, intermediate_size=32,
                    vocab_size=64, max_position_embeddings=max_position_embeddings)
    return LlamaConfig(**{**defaults, **kw}, rope_parameters=dict(rope))


def _hf_inv_freq(rope: dict, seq_len=None, **kw):
    config = _llama_config(rope, **kw)
    return ROPE_INIT_FUNCTIONS[rope["rope_type"]](config, None, seq_len=seq_len)


SCALINGS = [
    {"rope_type": "linear", "factor": 4.0},
    {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": ORIG},
    {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": ORIG,
     "truncate": False},
    {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": ORIG,
     "mscale": 1.0, "mscale_all_dim": 0.5},
    {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": ORIG,
     "mscale": 0.707, "mscale_all_dim": 0.707, "truncate": False},
    {"rope_type": "yarn", "factor": 3.0, "original_max_position_embeddings": ORIG,
     "beta_fast": 16.0, "beta_slow": 2.0, "attention_factor": 1.25},
    {"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": ORIG,
     "low_freq_factor": 1.0, "high_freq_factor": 4.0},
    {"rope_type": "llama3", "factor": 4.0, "original_max_position_embeddings": ORIG,
     "low_freq_factor": 2.0, "high_freq_factor": 8.0},
]


@pytest.mark.parametrize("theta", [10000.0, 500000.0])
@pytest.mark.parametrize("scaling", SCALINGS, ids=lambda s: "-".join(
    f"{k}={v}" for k, v in s.items() if k != "original_max_position_embeddings"))
def test_inv_freq_matches_hf(scaling, theta):
    want, want_attn = _hf_inv_freq({**scaling, "rope_theta": theta})
    got, got_attn = compute_inv_freq(HEAD_DIM, theta, scaling)
    assert_close(got, want.float(), rtol=1e-6, atol=0)
    assert got_attn == pytest.approx(want_attn, rel=1e-12)


@pytest.mark.parametrize("seq_len", [None, 1, ORIG - 1, ORIG, ORIG + 1, 3 * ORIG, 10 * ORIG])
@pytest.mark.parametrize("factor", [1.0, 2.0, 8.0])
def test_dynamic_matches_hf(seq_len, factor):
    """HF's dynamic NTK reads the original length from max_position_embeddings."""
    want, want_attn = _hf_inv_freq({"rope_type": "dynamic", "factor": factor,
                                    "rope_theta": 10000.0},
                                   seq_len=seq_len, max_position_embeddings=ORIG)
    got, got_attn = compute_inv_freq(
        HEAD_DIM, 10000.0, {"rope_type": "dynamic", "factor": factor,
                            "original_max_position_embeddings": ORIG}, seq_len=seq_len)
    assert_close(got, want, rtol=1e-6, atol=0)
    assert got_attn == want_attn


@pytest.mark.parametrize("seq_len", [None, ORIG, ORIG + 1, 5 * ORIG])
@pytest.mark.parametrize("extra", [{"factor": 4.0}, {"factor": 4.0, "attention_factor": 1.1}])
def test_longrope_matches_hf(seq_len, extra):
    scaling = {"rope_type": "longrope", "original_max_position_embeddings": ORIG,
               "short_factor": SHORT, "long_factor": LONG, **extra}
    want, want_attn = _hf_inv_freq({**scaling, "rope_theta": 10000.0}, seq_len=seq_len)
    got, got_attn = compute_inv_freq(HEAD_DIM, 10000.0, scaling, seq_len=seq_len)
    assert_close(got, want, rtol=1e-6, atol=0)
    assert got_attn == pytest.approx(want_attn, rel=1e-12)


# ------------------------------------------------------------------------- T5 and BLOOM
@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize("num_buckets,max_distance", [(32, 128), (16, 64), (8, 20), (64, 512)])
def test_t5_buckets_match_hf(bidirectional, num_buckets, max_distance):
    from transformers.models.t5.modeling_t5 import T5Attention
    rel = torch.arange(-3 * max_distance, 3 * max_distance + 1)[None, :] \
        + torch.arange(0, 5)[:, None]                                   # (5, N) both signs
    want = T5Attention._relative_position_bucket(rel, bidirectional=bidirectional,
                                                 num_buckets=num_buckets,
                                                 max_distance=max_distance)
    got = relative_position_bucket(rel, bidirectional, num_buckets, max_distance)
    assert torch.equal(got, want)


@pytest.mark.parametrize("n_heads", list(range(1, 17)) + [24, 48])
def test_alibi_slopes_match_bloom(n_heads):
    from transformers.models.bloom.modeling_bloom import build_alibi_tensor
    alibi = build_alibi_tensor(torch.ones(1, 2, dtype=torch.long), n_heads, torch.float32)
    want = alibi[:, 0, 1]                                      # slope * position 1
    assert_close(alibi_slopes(n_heads), want)


# ------------------------------------------------------------------- tiny Llama, copied
def _copy_llama(hf: LlamaForCausalLM, cfg: LMConfig) -> TransformerLM:
    model = TransformerLM(cfg).eval()
    sd = hf.state_dict()
    with torch.no_grad():
        model.tok.weight.copy_(sd["model.embed_tokens.weight"])
        for i, block in enumerate(model.blocks):
            p = f"model.layers.{i}."
            block.attn.qkv_proj.weight.copy_(torch.cat(
                [sd[p + f"self_attn.{n}_proj.weight"] for n in "qkv"]))
            block.attn.out_proj.weight.copy_(sd[p + "self_attn.o_proj.weight"])
            block.norm1.weight.copy_(sd[p + "input_layernorm.weight"])
            block.norm2.weight.copy_(sd[p + "post_attention_layernorm.weight"])
            block.mlp.up.weight.copy_(torch.cat([sd[p + "mlp.gate_proj.weight"],
                                                 sd[p + "mlp.up_proj.weight"]]))
            block.mlp.down.weight.copy_(sd[p + "mlp.down_proj.weight"])
        model.norm.weight.copy_(sd["model.norm.weight"])
        if not cfg.tie_embeddings:
            model.head.weight.copy_(sd["lm_head.weight"])
    return model


def _llama_pair(rope: dict | None, *, tie: bool, attn: str, eps: float = 1e-6):
    torch.manual_seed(0)
    hf_rope = {"rope_type": "default", "rope_theta": 10000.0, **(rope or {})}
    config = _llama_config(hf_rope, num_hidden_layers=2, intermediate_size=48, vocab_size=96,
                           rms_norm_eps=eps, tie_word_embeddings=tie,
                           max_position_embeddings=ORIG if rope and rope["rope_type"] in (
                               "dynamic",) else 4 * ORIG)
    config._attn_implementation = attn
    hf = LlamaForCausalLM(config).eval()
    with torch.no_grad():                     # sharper than the 0.02 init: positions matter
        for name, p in hf.named_parameters():
            if "norm" in name:
                p.copy_(1.0 + 0.1 * torch.randn(p.shape))
            else:
                p.normal_(0.0, 0.25)
    options = {"layout": "half", "theta": 10000.0}
    if rope:
        options["scaling"] = dict(rope)
    cfg = LMConfig(vocab_size=96, d_model=HEAD_DIM * N_HEADS, n_layers=2, n_heads=N_HEADS,
                   max_len=ORIG, d_ff=48, activation="swiglu", norm="rmsnorm", norm_eps=eps,
                   norm_placement="pre", bias=False, tie_embeddings=tie, pe="rope",
                   pe_options=options)
    return hf, _copy_llama(hf, cfg)


@pytest.mark.parametrize("rope,tie,attn", [
    (None, False, "eager"),
    (None, True, "sdpa"),
    ({"rope_type": "linear", "factor": 4.0}, False, "sdpa"),
    ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": ORIG}, False,
     "eager"),
    ({"rope_type": "dynamic", "factor": 4.0}, True, "eager"),
    ({"rope_type": "longrope", "factor": 4.0, "original_max_position_embeddings": ORIG,
      "short_factor": SHORT, "long_factor": LONG}, False, "sdpa"),
], ids=lambda x: x["rope_type"] if isinstance(x, dict) else str(x))
@torch.no_grad()
def test_tiny_llama_logits_match(rope, tie, attn):
    hf, model = _llama_pair(rope, tie=tie, attn=attn)
    ids = torch.randint(0, 96, (2, 24))
    assert_close(model(ids), hf(ids).logits, atol=1e-4, rtol=1e-4)
    # past the original length (dynamic/longrope switch there) and at an offset
    long_ids = torch.randint(0, 96, (1, ORIG + 16))
    assert_close(model(long_ids), hf(long_ids).logits, atol=1e-4, rtol=1e-4)
    pos = torch.arange(7, 7 + 24)
    assert_close(model(ids, pos=pos), hf(ids, position_ids=pos[None].expand(2, -1)).logits,
                 atol=1e-4, rtol=1e-4)


@torch.no_grad()
def test_tiny_llama_check_can_fail():
    """A wrong eps or layout is visible at the tolerance used above."""
    hf, model = _llama_pair(None, tie=False, attn="eager")
    ids = torch.randint(0, 96, (1, 24))
    want = hf(ids).logits
    _, other = _llama_pair({"rope_type": "linear", "factor": 1.5}, tie=False, attn="eager")
    assert (other(ids) - want).abs().max() > 1e-3
    model.pe.layout = "interleaved"
    assert (model(ids) - want).abs().max() > 1e-3
