"""Cached decoding equals a full recompute, for every registered encoding.

"Full recompute" of a chunk of tokens [a, b) means ``model(ids[:, :b])[:, a:b]``: the logits
a model without a cache gives when it sees the first b tokens. For most encodings this is
also a slice of one forward pass over the whole sequence; for length-dependent RoPE scalings
(dynamic NTK, LongRoPE's short/long switch) the frequencies depend on the current length, so
only the prefix recompute is the right reference (Hugging Face's cache keeps stale keys
there, transformers #25104).
"""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from posenc import list_encodings

pytestmark = pytest.mark.usefixtures("single_thread")

T = 20            # tokens per test sequence
TRAIN_LEN = 8     # max_len (original length) for the RoPE scalings: T goes well past it

LONG = [1.0, 2.0, 4.0, 8.0]           # rotary_dim / 2 = 4 values (head_dim 8)
SHORT = [1.0, 1.25, 1.5, 2.0]
ROPE_CASES = [
    {"scaling": {"rope_type": "dynamic", "factor": 4.0}},
    {"scaling": {"rope_type": "dynamic", "factor": 1.0}},
    {"scaling": {"rope_type": "yarn", "factor": 4.0}},
    {"scaling": {"rope_type": "longrope", "factor": 4.0, "long_factor": LONG,
                 "short_factor": SHORT}},
    {"scaling": {"rope_type": "linear", "factor": 2.0}},
    {"scaling": {"rope_type": "ntk", "factor": 4.0}},
    {"scaling": {"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.0,
                 "high_freq_factor": 4.0}},
    {"layout": "interleaved", "rotary_dim": 4},
    {"logn_base_len": 4},
    {"logn_base_len": 4, "scaling": {"rope_type": "dynamic", "factor": 2.0}},
]
CASES = ([(name, {}, T) for name in list_encodings()]
         + [("rope", opts, TRAIN_LEN) for opts in ROPE_CASES]
         + [("alibi", {"logn_base_len": 4}, T)])


def _case_id(case) -> str:
    name, opts, max_len = case
    return f"{name}-{opts}" if opts else name


def _model(tiny_lm, name, opts, max_len):
    return tiny_lm(name, opts, max_len=max_len, d_model=32, n_heads=4)


def _check_chunks(model, ids, bounds, msg):
    """Feed ids in chunks ending at ``bounds`` through one set of caches."""
    caches = model.make_caches(ids.shape[0], ids.shape[1])
    start = 0
    for end in bounds:
        got = model(ids[:, start:end], caches=caches)
        want = model(ids[:, :end])[:, start:end]
        assert_close(got, want, atol=2e-5, rtol=1e-5,
                     msg=lambda m: f"{msg}, tokens [{start}, {end}): {m}")
        start = end


@pytest.mark.parametrize("case", CASES, ids=_case_id)
@torch.no_grad()
def test_token_by_token_equals_recompute(case, tiny_lm):
    name, opts, max_len = case
    model = _model(tiny_lm, name, opts, max_len)
    ids = torch.randint(0, 48, (2, T))
    _check_chunks(model, ids, [5, *range(6, T + 1)], f"{name} {opts} prefill 5 then 1 by 1")


@pytest.mark.parametrize("case", CASES, ids=_case_id)
@torch.no_grad()
def test_chunked_prefill_equals_recompute(case, tiny_lm):
    name, opts, max_len = case
    model = _model(tiny_lm, name, opts, max_len)
    ids = torch.randint(0, 48, (2, T))
    # chunks that end before, at and past TRAIN_LEN, then single tokens
    _check_chunks(model, ids, [3, 7, 8, 13, 18, 19, 20], f"{name} {opts} chunked")


@pytest.mark.parametrize("name", list_encodings())
@torch.no_grad()
def test_cached_forward_is_causal_slice(name, tiny_lm):
    """For length-independent encodings one full pass already is the recompute."""
    model = tiny_lm(name, max_len=T)
    ids = torch.randint(0, 48, (2, T))
    full = model(ids)
    for end in (1, 9, T):
        assert_close(model(ids[:, :end]), full[:, :end], atol=2e-5, rtol=1e-5)


@pytest.mark.parametrize("name", list_encodings())
@torch.no_grad()
def test_cache_checks_can_fail(name, tiny_lm):
    """A cache missing a token, or (for encodings with a q/k or score hook) a wrong position,
    changes the logits well beyond the tolerance above: the tests are not vacuous."""
    model = tiny_lm(name, max_len=T + 4)
    ids = torch.randint(0, 48, (1, T))
    right = model(ids)[:, -1:]
    caches = model.make_caches(1, T)
    model(ids[:, :T - 1], caches=caches)
    for cache in caches:
        cache.length -= 1                                   # lose token T - 2
    lost = model(ids[:, T - 1:], pos=torch.tensor([T - 1]), caches=caches)
    assert (lost - right).abs().max() > 1e-3
    if {"transform_qk", "score_bias"} & set(model.pe.hook_kinds()):
        caches = model.make_caches(1, T)
        model(ids[:, :T - 1], caches=caches)
        wrong = model(ids[:, T - 1:], pos=torch.tensor([T + 2]), caches=caches)
        assert (wrong - right).abs().max() > 1e-3


def _argmax_loop(model, ids, n):
    for _ in range(n):
        ids = torch.cat([ids, model(ids)[:, -1].argmax(-1, keepdim=True)], dim=1)
    return ids


@pytest.mark.parametrize("case", [(n, {}, 24) for n in list_encodings()] + [
    ("rope", {"scaling": {"rope_type": "dynamic", "factor": 4.0}}, 6),
    ("rope", {"scaling": {"rope_type": "longrope", "factor": 4.0, "long_factor": LONG,
                          "short_factor": SHORT}}, 6),
], ids=_case_id)
@torch.no_grad()
def test_greedy_generate_equals_uncached_argmax(case, tiny_lm):
    name, opts, max_len = case
    model = _model(tiny_lm, name, opts, max_len)
    prompt = torch.randint(0, 48, (2, 4))
    out = model.generate(prompt, 12)
    assert out.shape == (2, 16)
    assert torch.equal(out, _argmax_loop(model, prompt, 12))


@torch.no_grad()
def test_sampling_is_reproducible_and_respects_top_k(tiny_lm):
    model = tiny_lm("rope")
    prompt = torch.randint(0, 48, (1, 4))
    runs = [model.generate(prompt, 8, temperature=1.0, top_k=3,
                           generator=torch.Generator().manual_seed(5)) for _ in range(2)]
    assert torch.equal(runs[0], runs[1])
    ids = runs[0]
    logits = model(ids[:, :-1])[0, 3:]                      # logits that chose tokens 4..11
    top3 = logits.topk(3, dim=-1).indices
    assert all(int(t) in top3[i].tolist() for i, t in enumerate(ids[0, 4:]))


@torch.no_grad()
def test_recompute_returns_only_the_new_rows_and_weights(tiny_lm):
    """When a length-dependent scaling restarts the caches, callers still get rows for the
    tokens they passed (logits and attention weights)."""
    model = tiny_lm("rope", {"scaling": {"rope_type": "dynamic", "factor": 4.0}},
                    max_len=TRAIN_LEN)
    ids = torch.randint(0, 48, (1, T))
    caches = model.make_caches(1, T)
    model(ids[:, :TRAIN_LEN + 2], caches=caches)
    logits, weights = model(ids[:, TRAIN_LEN + 2:TRAIN_LEN + 4], caches=caches,
                            need_weights=True)
    want, want_weights = model(ids[:, :TRAIN_LEN + 4], need_weights=True)
    assert logits.shape == (1, 2, 48)
    assert_close(logits, want[:, -2:], atol=2e-5, rtol=1e-5)
    for got, ref in zip(weights, want_weights):
        assert got.shape == (1, 4, 2, TRAIN_LEN + 4)
        assert_close(got, ref[:, :, -2:], atol=1e-6, rtol=1e-5)
    assert all(c.length == TRAIN_LEN + 4 for c in caches)
