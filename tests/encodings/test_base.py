"""The encoding interface: the registry and option errors, log-n attention scaling, which
encodings are translation invariant and ``score_bias(causal=True)`` of every biased
encoding."""

from __future__ import annotations

import math

import pytest
import torch
from torch.testing import assert_close

from posenc import list_encodings
from posenc.encodings import build_encoding
from posenc.encodings.context import HookContext
from posenc.models.lm import LMConfig, TransformerLM
from tests.helpers import context_options, hook_context, sharpen

pytestmark = pytest.mark.usefixtures("single_thread")


def _rope(head_dim=8, **options):
    return build_encoding("rope", n_heads=2, head_dim=head_dim, **options)


BIASED = [n for n in list_encodings()
          if build_encoding(n, n_heads=2, head_dim=8, max_len=64,
                            **context_options(n)).has_bias]


# ---------------------------------------------------------------- registry and options
def test_unknown_encoding_lists_the_valid_ones():
    with pytest.raises(ValueError, match="unknown encoding 'ropey'") as err:
        build_encoding("ropey", n_heads=2, head_dim=8)
    assert all(name in str(err.value) for name in list_encodings())
    with pytest.raises(ValueError, match="valid encodings"):
        TransformerLM(LMConfig(pe="ropey"))


def test_unknown_option_lists_the_valid_ones():
    with pytest.raises(ValueError, match="thetta") as err:
        _rope(thetta=500000.0)
    for option in ("theta", "layout", "rotary_dim", "scaling", "logn_base_len"):
        assert option in str(err.value)
    with pytest.raises(ValueError, match="bidirectional"):
        build_encoding("nope", n_heads=2, head_dim=8, bidirectional=True)


@pytest.mark.parametrize("name,options,option", [
    ("rope", {"layout": "neox"}, "layout"),
    ("rope", {"theta": 1.0}, "theta"),
    ("rope", {"logn_base_len": 1}, "logn_base_len"),
    ("alibi", {"bidirectional": "yes"}, "bidirectional"),
    ("t5", {"num_buckets": 1}, "num_buckets"),
    ("t5", {"num_buckets": 32, "max_distance": 16}, "max_distance"),
    ("sinusoidal", {"scale": -1.0}, "scale"),
    ("learned", {}, "max_len"),
])
def test_option_out_of_range_is_named(name, options, option):
    with pytest.raises(ValueError, match=option):
        build_encoding(name, n_heads=2, head_dim=8, **options)


@pytest.mark.parametrize("head_dim", [7, 1, 33])
def test_rope_odd_head_dim(head_dim):
    with pytest.raises(ValueError, match=f"head_dim={head_dim}"):
        _rope(head_dim=head_dim)
    with pytest.raises(ValueError, match="head_dim"):     # d_model 28 / 4 heads = 7
        TransformerLM(LMConfig(d_model=4 * head_dim, n_heads=4, pe="rope"))


@pytest.mark.parametrize("rotary_dim", [10, 16, 3, 0, -2, 4.0, True])
def test_rope_bad_rotary_dim(rotary_dim):
    with pytest.raises(ValueError, match=r"rotary_dim must be an even integer in \[2, "
                                         r"head_dim=8\]"):
        _rope(rotary_dim=rotary_dim)


# ------------------------------------------------------------------------------- log-n
@pytest.mark.parametrize("base_len", [2, 8, 100])
def test_logn_factor_is_one_up_to_base_len_then_log_ratio(base_len):
    pe = build_encoding("nope", n_heads=2, head_dim=8, logn_base_len=base_len)
    q_pos = torch.arange(300)
    got = pe.attn_scale(HookContext.for_positions(q_pos, causal=True))  # query p sees p + 1
    n = q_pos.double() + 1
    want = torch.where(n <= base_len, torch.ones_like(n), torch.log(n) / math.log(base_len))
    assert_close(got.double(), want, rtol=1e-6, atol=0)
    # bidirectional: every query sees all keys
    for n_keys in (base_len, 3 * base_len):
        got = pe.attn_scale(HookContext.for_positions(torch.arange(4), torch.arange(n_keys),
                                                      causal=False))
        want = max(1.0, math.log(n_keys) / math.log(base_len))
        assert_close(got.double(), torch.full((4,), want, dtype=torch.float64))


def test_logn_is_off_by_default():
    pe = build_encoding("rope", n_heads=2, head_dim=8)
    assert pe.attn_scale(HookContext.for_positions(torch.arange(9), torch.arange(9),
                                                   causal=True)) is None


@torch.no_grad()
def test_logn_changes_logits_only_past_base_len(tiny_lm):
    ids = torch.randint(0, 48, (1, 16))
    plain = tiny_lm("alibi")(ids)
    scaled = tiny_lm("alibi", {"logn_base_len": 6})(ids)          # same weights (same seed)
    assert_close(scaled[:, :6], plain[:, :6])
    assert ((scaled[:, 6:] - plain[:, 6:]).abs().amax(-1) > 1e-4).all()


def test_translation_invariance_is_the_distance_only_encodings_without_position_reads():
    """Log-n (a factor of the query's own position) and DeBERTa's absolute queries take it
    away; TUPE's absolute correlation never has it."""
    def pe(name, **options):
        return build_encoding(name, n_heads=2, head_dim=8, max_len=32, **options)
    invariant = {name for name in list_encodings() if pe(name, **context_options(name))
                 .translation_invariant}
    assert invariant == {"alibi", "t5", "kerple", "shaw", "xl", "deberta", "dynamic_bias",
                         "cope", "forget_gate", "path", "path_fox"}   # the last four read
    #                                                                   no position
    for name in invariant:
        assert not pe(name, logn_base_len=8).translation_invariant
    assert not pe("deberta", absolute_query=True).translation_invariant


# ------------------------------------------------------------- score_bias(causal=True)
def _sharing_parameters(source, target):
    """``target`` holding ``source``'s parameter objects wherever it has the same names."""
    own = dict(target.named_parameters())
    for name, param in source.named_parameters():
        if name in own:
            owner, _, leaf = name.rpartition(".")
            setattr(target.get_submodule(owner) if owner else target, leaf, param)
    return target


@pytest.mark.parametrize("name", BIASED)
def test_causal_bias_equals_the_full_one_where_visible(name):
    """``causal=True`` may skip hidden pairs; at visible pairs its values and gradients (into
    q, k and every parameter) are those of the full bias (for a bias built in its causal
    form, which refuses causal=False: its per-distance formula, ``distance_bias``, or for a
    content-dependent one the bidirectional build sharing its parameters)."""
    pe = sharpen(build_encoding(name, n_heads=2, head_dim=8, max_len=64,
                                **context_options(name)), std=0.5)
    gen = torch.Generator().manual_seed(1)
    pos = torch.arange(3, 12)
    q = torch.randn(2, 2, 9, 8, generator=gen, requires_grad=True)
    k = torch.randn(2, 2, 9, 8, generator=gen, requires_grad=True)
    seen = pos[None, :] <= pos[:, None]
    grad = torch.randn(2, 2, 9, 9, generator=gen) * seen
    leaves = [q, k, *pe.parameters()]
    results = []
    causal_form = getattr(pe, "bidirectional", True) is False
    for causal in (False, True):
        if causal_form and not causal:
            with pytest.raises(ValueError, match="built for causal attention"):
                pe.score_bias(q, k, hook_context(pe, pos, pos, batch=2, causal=causal))
            if hasattr(pe, "distance_bias"):
                rel = pos[None, :] - pos[:, None]                      # k_pos - q_pos
                bias = pe.distance_bias(rel.flatten()).view(1, 2, 9, 9).expand(2, 2, 9, 9)
            else:
                full = _sharing_parameters(pe, build_encoding(
                    name, n_heads=2, head_dim=8, max_len=64, bidirectional=True))
                at = hook_context(full, pos, pos, batch=2, causal=causal)
                bias = full.score_bias(q, k, at)
        else:
            at = hook_context(pe, pos, pos, batch=2, causal=causal)
            bias = pe.score_bias(q, k, at).expand(2, 2, 9, 9)
        assert torch.isfinite(bias).all()
        grads = (torch.autograd.grad(bias, leaves, grad, allow_unused=True)
                 if bias.requires_grad else [None] * len(leaves))      # fixed biases (ALiBi)
        results.append((bias[..., seen], grads))
    (full, full_grads), (part, part_grads) = results
    assert_close(part, full)
    for g, w in zip(part_grads, full_grads):
        if w is None or g is None:
            assert g is None or not g.any()
        else:
            assert_close(g, w, atol=1e-5, rtol=1e-5)


def test_a_near_miss_gets_a_suggestion_and_a_missing_size_is_one_line():
    from posenc import build_encoding
    from posenc.errors import UserError
    with pytest.raises(UserError, match="unknown encoding 'rop' \\(did you mean 'rope'\\?\\)"):
        build_encoding("rop", n_heads=2, head_dim=8)
    with pytest.raises(UserError, match="did you mean 'rope'\\? names are case-sensitive"):
        build_encoding("RoPE", n_heads=2, head_dim=8)
    with pytest.raises(UserError, match="needs head_dim"):
        build_encoding("rope", n_heads=2)
    with pytest.raises(UserError, match="unknown option\\(s\\) thetta \\(did you mean "
                                        "'theta'\\?\\)"):
        build_encoding("rope", n_heads=2, head_dim=8, thetta=10.0)
