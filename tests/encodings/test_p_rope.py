"""p-RoPE (``rope`` with ``partial=p``): which frequencies are kept, the pairs left
unrotated, the relative property, option errors; against transformers' "proportional" RoPE
(its frequencies and a tiny random Llama whose weights are copied)."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from posenc import LMConfig, build_encoding
from posenc.encodings.context import HookContext
from tests.encodings.test_rope import HEAD_DIM, N_HEADS, _copy_llama, _llama_config
from tests.helpers import decode_in_steps, needs_transformers

pytestmark = pytest.mark.usefixtures("single_thread")

D = 16


def _p_rope(partial, **options):
    return build_encoding("rope", n_heads=2, head_dim=D, partial=partial, **options)


def _rotate(pe, x, pos):
    """x (1, 2, L, D) at positions pos (L,) -> the rotated queries."""
    return pe.transform_qk(x, x, HookContext.for_positions(pos))[0]


@pytest.mark.parametrize("partial,kept", [(1.0, 8), (0.75, 6), (0.5, 4), (0.3, 2), (0.125, 1)])
def test_keeps_the_highest_frequencies_of_rope(partial, kept):
    full = build_encoding("rope", n_heads=2, head_dim=D).inv_freq
    pe = _p_rope(partial)
    assert pe.kept_pairs == kept
    assert_close(pe.inv_freq[:kept], full[:kept], rtol=0, atol=0)   # RoPE's own, unchanged
    assert (pe.inv_freq[kept:] == 0).all()
    assert (full[:kept].min() > full[kept:]).all() if kept < 8 else True     # the lowest go


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_dropped_pairs_are_not_rotated_and_kept_ones_are_ropes(layout):
    pe, rope = _p_rope(0.5, layout=layout), build_encoding("rope", n_heads=2, head_dim=D,
                                                           layout=layout)
    x = torch.randn(1, 2, 9, D, generator=torch.Generator().manual_seed(0))
    pos = torch.arange(100, 109)
    got, want = _rotate(pe, x, pos), _rotate(rope, x, pos)
    if layout == "half":      # pairs (i, i + 8): kept i < 4
        kept = [0, 1, 2, 3, 8, 9, 10, 11]
    else:                     # pairs (2i, 2i + 1)
        kept = list(range(8))
    dropped = [d for d in range(D) if d not in kept]
    assert_close(got[..., dropped], x[..., dropped], rtol=0, atol=0)
    assert_close(got[..., kept], want[..., kept])
    assert (got - want).abs().max() > 1e-2          # it is not RoPE


def test_scores_depend_only_on_relative_position():
    pe = _p_rope(0.75)
    g = torch.Generator().manual_seed(1)
    q, k = torch.randn(1, 2, 1, D, generator=g), torch.randn(1, 2, 1, D, generator=g)

    def score(m, n):
        at = HookContext.for_positions(torch.tensor([m]), torch.tensor([n]))
        qr, kr = pe.transform_qk(q, k, at)
        return (qr * kr).sum()

    assert_close(score(3, 10), score(503, 510), atol=1e-4, rtol=0)
    assert (score(3, 10) - score(3, 11)).abs() > 1e-3


def test_one_is_rope_and_works_with_scalings():
    x = torch.randn(1, 2, 5, D, generator=torch.Generator().manual_seed(2))
    pos = torch.arange(5)
    assert_close(_rotate(_p_rope(1.0), x, pos),
                 _rotate(build_encoding("rope", n_heads=2, head_dim=D), x, pos))
    linear = _p_rope(0.5, scaling={"rope_type": "linear", "factor": 4.0})
    assert_close(linear.inv_freq[:4], build_encoding(
        "rope", n_heads=2, head_dim=D, scaling={"rope_type": "linear", "factor": 4.0}
    ).inv_freq[:4])
    assert (linear.inv_freq[4:] == 0).all()


@pytest.mark.parametrize("partial,message", [
    (0.0, r"partial must be a number in \(0.0, 1.0\]"),
    (1.5, r"partial must be a number in \(0.0, 1.0\]"),
    ("half", r"partial must be a number in \(0.0, 1.0\]"),
    (0.1, r"partial=0.1 keeps no frequency of rotary_dim=16"),
])
def test_bad_partial_is_named(partial, message):
    with pytest.raises(ValueError, match=message):
        _p_rope(partial)


# ---------------------------------------------------------------- against Hugging Face
@needs_transformers
@pytest.mark.parametrize("partial", [0.25, 0.5, 0.75, 1.0])
def test_frequencies_match_hf_proportional_rope(partial):
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    config = _llama_config({"rope_type": "proportional", "rope_theta": 10000.0,
                            "partial_rotary_factor": partial})
    want, _ = ROPE_INIT_FUNCTIONS["proportional"](config, None)
    got = build_encoding("rope", n_heads=N_HEADS, head_dim=HEAD_DIM, partial=partial).inv_freq
    assert_close(got, want.float(), rtol=1e-6, atol=0)


@needs_transformers
@torch.no_grad()
def test_tiny_llama_with_proportional_rope_logits_match():
    from transformers import LlamaForCausalLM
    torch.manual_seed(0)
    config = _llama_config({"rope_type": "proportional", "rope_theta": 10000.0,
                            "partial_rotary_factor": 0.5}, num_hidden_layers=2,
                           intermediate_size=48, vocab_size=96)
    config._attn_implementation = "eager"
    hf = LlamaForCausalLM(config).eval()
    for name, p in hf.named_parameters():
        p.copy_(1.0 + 0.1 * torch.randn(p.shape) if "norm" in name
                else 0.25 * torch.randn(p.shape))
    cfg = LMConfig(vocab_size=96, d_model=HEAD_DIM * N_HEADS, n_layers=2, n_heads=N_HEADS,
                   max_len=64, d_ff=48, activation="swiglu", norm="rmsnorm", norm_eps=1e-6,
                   norm_placement="pre", bias=False, tie_embeddings=False, pe="rope",
                   pe_options={"partial": 0.5})
    model = _copy_llama(hf, cfg)
    ids = torch.randint(0, 96, (2, 24))
    pos = torch.arange(300, 324)
    want = hf(ids, position_ids=pos[None].expand(2, -1)).logits
    assert_close(model(ids, positions=pos), want, atol=1e-4, rtol=1e-4)
    full = _copy_llama(hf, LMConfig(**{**cfg.__dict__, "pe_options": {}}))
    assert (full(ids, positions=pos) - want).abs().max() > 1e-3       # the check can fail


@torch.no_grad()
def test_in_a_model_cached_decoding_equals_full_forward(tiny_lm):
    model = tiny_lm("rope", {"partial": 0.5}, max_len=32)
    ids = torch.randint(0, 48, (2, 12), generator=torch.Generator().manual_seed(0))
    full = model(ids)
    assert_close(decode_in_steps(model, ids, 5), full, atol=2e-5, rtol=1e-5)
