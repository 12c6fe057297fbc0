"""RoPE properties: relative q.k, preserved norms, both layouts, partial rotary, fp32 angles,
q/k checks; against Hugging Face (skipped when transformers is not installed): the frequencies
of every scaling both libraries have, and a tiny random Llama whose weights are copied into a
``TransformerLM``, with plain RoPE and with scalings."""

from __future__ import annotations

import math

import pytest
import torch
from torch.testing import assert_close

from posenc import LMConfig, TransformerLM, build_encoding
from posenc.encodings.context import HookContext
from posenc.encodings.rope_scaling import compute_inv_freq
from tests.helpers import needs_transformers
from tests.helpers import raises_one_line as _raises

try:
    from transformers import LlamaConfig, LlamaForCausalLM
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
except ImportError:                           # the tests against Hugging Face are skipped
    LlamaConfig = LlamaForCausalLM = ROPE_INIT_FUNCTIONS = None

pytestmark = pytest.mark.usefixtures("single_thread")

D = 16
LAYOUT_DIMS = [(layout, rot) for layout in ("half", "interleaved") for rot in (16, 8)]


def _rope(layout="half", rotary_dim=None, **options):
    return build_encoding("rope", n_heads=2, head_dim=D, layout=layout, rotary_dim=rotary_dim,
                          **options)


def _reference_rotation(x: torch.Tensor, pos: torch.Tensor, layout: str, rot: int,
                        theta: float = 10000.0) -> torch.Tensor:
    """Independent float64 rotation by explicit 2x2 matrices. x (L, D), pos (L,)."""
    x = x.double()
    out = x.clone()
    half = rot // 2
    for i in range(half):
        angle = pos.double() * theta ** (-2.0 * i / rot)
        a, b = (i, i + half) if layout == "half" else (2 * i, 2 * i + 1)
        c, s = torch.cos(angle), torch.sin(angle)
        out[:, a] = c * x[:, a] - s * x[:, b]
        out[:, b] = s * x[:, a] + c * x[:, b]
    return out


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
    if rope:             # Hugging Face's dynamic NTK follows every token
        options["scaling"] = dict(rope, **({"schedule": "per_token"}
                                           if rope["rope_type"] == "dynamic" else {}))
    cfg = LMConfig(vocab_size=96, d_model=HEAD_DIM * N_HEADS, n_layers=2, n_heads=N_HEADS,
                   max_len=ORIG, d_ff=48, activation="swiglu", norm="rmsnorm", norm_eps=eps,
                   norm_placement="pre", bias=False, tie_embeddings=tie, pe="rope",
                   pe_options=options)
    return hf, _copy_llama(hf, cfg)


@pytest.mark.parametrize("layout,rot", LAYOUT_DIMS)
def test_matches_explicit_rotation(layout, rot):
    pe = _rope(layout, rot)
    pos = torch.tensor([0, 1, 5, 63, 1000, 4097])
    x = torch.randn(1, 1, len(pos), D, dtype=torch.float64).float()
    got, _ = pe.transform_qk(x, x, HookContext.for_positions(pos, pos))
    want = _reference_rotation(x[0, 0], pos, layout, rot)
    # fp32 angles at position ~4000 carry ~4000 * 2^-24 rad of rounding
    assert_close(got[0, 0].double(), want, atol=2e-4, rtol=1e-5)
    assert torch.equal(got[..., rot:], x[..., rot:])            # partial rotary: rest untouched


@pytest.mark.parametrize("layout,rot", LAYOUT_DIMS)
def test_qk_depends_only_on_relative_position(layout, rot):
    pe = _rope(layout, rot)
    q = torch.randn(1, 2, 1, D).expand(1, 2, 12, D)            # same vector at every position
    k = torch.randn(1, 2, 1, D).expand(1, 2, 12, D)
    pos = torch.arange(12)

    def scores(offset):
        qr, kr = pe.transform_qk(q, k, HookContext.for_positions(pos + offset, pos + offset))
        return qr @ kr.transpose(-1, -2)                         # (1, 2, 12, 12): m, n

    s = scores(0)
    for offset in (1, 37, 2000):
        assert_close(scores(offset), s, atol=2e-4, rtol=1e-4)
    # along each diagonal (fixed m - n) every entry is the same
    for d in range(-11, 12):
        diag = torch.diagonal(s, offset=d, dim1=-2, dim2=-1)
        assert_close(diag, diag[..., :1].expand_as(diag), atol=2e-5, rtol=1e-5)
    # and the scores really change with m - n (not a constant)
    assert (s[..., 0, 0] - s[..., 5, 0]).abs().max() > 1e-2


@pytest.mark.parametrize("layout,rot", LAYOUT_DIMS)
def test_preserves_norms(layout, rot):
    pe = _rope(layout, rot)
    x = torch.randn(2, 2, 9, D)
    pos = torch.tensor([0, 3, 7, 100, 511, 1024, 5000, 65535, 7])
    q, k = pe.transform_qk(x, x * 2, HookContext.for_positions(pos, pos))
    assert_close(q.norm(dim=-1), x.norm(dim=-1))
    assert_close(k.norm(dim=-1), 2 * x.norm(dim=-1))


def test_attention_factor_scales_norms():
    """YaRN's attention factor multiplies cos and sin, so norms scale by it."""
    pe = _rope(scaling={"rope_type": "yarn", "factor": 8.0,
                        "original_max_position_embeddings": 64})
    factor = 0.1 * math.log(8.0) + 1.0
    assert pe.attention_factor == pytest.approx(factor)
    x = torch.randn(1, 2, 5, D)
    q, _ = pe.transform_qk(x, x, HookContext.for_positions(torch.arange(5), torch.arange(5)))
    assert_close(q.norm(dim=-1), factor * x.norm(dim=-1))


def test_layouts_are_a_permutation_of_each_other():
    """Interleaved pairs (2i, 2i+1) are half's pairs (i, i + D/2) after a fixed permutation."""
    perm = torch.cat([torch.arange(0, D, 2), torch.arange(1, D, 2)])   # interleaved -> half
    x = torch.randn(1, 2, 7, D)
    pos = torch.arange(3, 10)
    inter, _ = _rope("interleaved").transform_qk(x, x, HookContext.for_positions(pos, pos))
    half, _ = _rope("half").transform_qk(x[..., perm], x[..., perm],
                                         HookContext.for_positions(pos, pos))
    assert_close(inter[..., perm], half)


def test_queries_and_keys_at_different_positions():
    """A decode step (1 query, many keys) rotates like the matching rows of a full pass."""
    pe = _rope()
    q, k = torch.randn(1, 2, 8, D), torch.randn(1, 2, 8, D)
    pos = torch.arange(8)
    q_full, k_full = pe.transform_qk(q, k, HookContext.for_positions(pos, pos))
    q_step, k_step = pe.transform_qk(q[:, :, -1:], k, HookContext.for_positions(pos[-1:], pos))
    assert_close(q_step, q_full[:, :, -1:])
    assert_close(k_step, k_full)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_angles_are_fp32_for_low_precision_inputs(dtype):
    """At large positions the angle must be computed in fp32: the result equals the fp32
    computation rounded once, not a computation in the low-precision dtype."""
    pe = _rope()
    pos = torch.tensor([100_000, 100_001, 250_003])
    x = torch.randn(1, 2, 3, D).to(dtype)
    got, _ = pe.transform_qk(x, x, HookContext.for_positions(pos, pos))
    want, _ = pe.transform_qk(x.float(), x.float(), HookContext.for_positions(pos, pos))
    assert got.dtype == dtype
    assert torch.equal(got, want.to(dtype))


def test_inv_freq_buffer_is_fp32_and_not_saved():
    pe = _rope(rotary_dim=8)
    assert pe.inv_freq.dtype == torch.float32 and pe.inv_freq.shape == (4,)
    pe = pe.to(torch.bfloat16)
    x = torch.randn(1, 2, 3, D)
    assert "inv_freq" not in pe.state_dict()
    at = HookContext.for_positions(torch.arange(3))
    assert_close(pe.transform_qk(x, x, at)[0], _rope(rotary_dim=8).transform_qk(x, x, at)[0])


def test_theta_changes_frequencies():
    x = torch.randn(1, 1, 4, D)
    pos = torch.arange(4) * 50
    a, _ = _rope(theta=10000.0).transform_qk(x, x, HookContext.for_positions(pos, pos))
    b, _ = _rope(theta=500000.0).transform_qk(x, x, HookContext.for_positions(pos, pos))
    want = _reference_rotation(x[0, 0], pos, "half", D, theta=500000.0)
    assert_close(b[0, 0].double(), want, atol=2e-5, rtol=1e-5)
    assert (a - b).abs().max() > 1e-2


# ---------------------------------------------------------------------- q and k checks
@pytest.mark.parametrize("name", ["rope", "xpos"])
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int8])
def test_rotary_encodings_refuse_integer_q_and_k(name, dtype):
    pe = build_encoding(name, n_heads=2, head_dim=8)
    x, pos = torch.randint(-5, 5, (1, 2, 3, 8), dtype=dtype), torch.arange(3)
    _raises(r"q must be a floating-point tensor \(batch, heads, length, head_dim\), got "
            rf"shape \(1, 2, 3, 8\), dtype {dtype}", pe.transform_qk, x, x,
            HookContext.for_positions(pos, pos))
    _raises(r"k must be a floating-point tensor", pe.transform_qk, x.float(), x,
            HookContext.for_positions(pos, pos))


def test_rope_checks_position_lengths_and_dtype():
    pe = build_encoding("rope", n_heads=2, head_dim=8)
    q, k = torch.randn(1, 2, 3, 8), torch.randn(1, 2, 4, 8)
    assert pe.transform_qk(q, k,
                           HookContext.for_positions(torch.arange(1, 4),
                                                     torch.arange(4)))[0].shape == q.shape
    _raises(r"q_pos must have shape \(3,\) or \(1, 3\), one position per token, got "
            r"shape \(4,\)", pe.transform_qk, q, k,
            HookContext.for_positions(torch.arange(4), torch.arange(4)))
    _raises(r"k_pos must have shape \(4,\)", pe.transform_qk, q, k,
            HookContext.for_positions(torch.arange(3), torch.arange(3)))
    _raises(r"q_pos must be an integer tensor of positions, got dtype torch.float32",
            HookContext.for_positions, torch.arange(3.0), torch.arange(4))


# ---------------------------------------------------------------- against Hugging Face
@needs_transformers
@pytest.mark.parametrize("theta", [10000.0, 500000.0])
@pytest.mark.parametrize("scaling", SCALINGS, ids=lambda s: "-".join(
    f"{k}={v}" for k, v in s.items() if k != "original_max_position_embeddings"))
def test_inv_freq_matches_hf(scaling, theta):
    want, want_attn = _hf_inv_freq({**scaling, "rope_theta": theta})
    got, got_attn = compute_inv_freq(HEAD_DIM, theta, scaling)
    assert_close(got, want.float(), rtol=1e-6, atol=0)
    assert got_attn == pytest.approx(want_attn, rel=1e-12)


@needs_transformers
@pytest.mark.parametrize("seq_len", [None, 1, ORIG - 1, ORIG, ORIG + 1, 3 * ORIG, 10 * ORIG])
@pytest.mark.parametrize("factor", [1.0, 2.0, 8.0])
def test_dynamic_matches_hf(seq_len, factor):
    """HF's dynamic NTK (posenc's per-token schedule) reads the original length from
    max_position_embeddings."""
    want, want_attn = _hf_inv_freq({"rope_type": "dynamic", "factor": factor,
                                    "rope_theta": 10000.0},
                                   seq_len=seq_len, max_position_embeddings=ORIG)
    got, got_attn = compute_inv_freq(
        HEAD_DIM, 10000.0, {"rope_type": "dynamic", "factor": factor, "schedule": "per_token",
                            "original_max_position_embeddings": ORIG}, seq_len=seq_len)
    assert_close(got, want, rtol=1e-6, atol=0)
    assert got_attn == want_attn


@needs_transformers
@pytest.mark.parametrize("seq_len", [None, ORIG, ORIG + 1, 5 * ORIG])
@pytest.mark.parametrize("extra", [{"factor": 4.0}, {"factor": 4.0, "attention_factor": 1.1}])
def test_longrope_matches_hf(seq_len, extra):
    scaling = {"rope_type": "longrope", "original_max_position_embeddings": ORIG,
               "short_factor": SHORT, "long_factor": LONG, **extra}
    want, want_attn = _hf_inv_freq({**scaling, "rope_theta": 10000.0}, seq_len=seq_len)
    got, got_attn = compute_inv_freq(HEAD_DIM, 10000.0, scaling, seq_len=seq_len)
    assert_close(got, want, rtol=1e-6, atol=0)
    assert got_attn == pytest.approx(want_attn, rel=1e-12)


@needs_transformers
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
    assert_close(model(ids, positions=pos), hf(ids, position_ids=pos[None].expand(2, -1)).logits,
                 atol=1e-4, rtol=1e-4)


@needs_transformers
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
