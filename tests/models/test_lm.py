"""The decoder-only TransformerLM: cached decoding equals a full recompute for every
registered encoding; the config and input checks; every encoding runs with bfloat16 weights.

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

from posenc import LMConfig, TransformerLM, list_encodings
from posenc.attention import MultiHeadAttention
from posenc.models.positions import positions_from_documents, positions_from_mask
from tests.helpers import context_options
from tests.helpers import raises_one_line as _raises

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


VOCAB = 16


def _lm(pe: str = "rope") -> TransformerLM:
    return TransformerLM(LMConfig(vocab_size=VOCAB, d_model=16, n_heads=2, n_layers=1,
                                  max_len=32, pe=pe,
                                  pe_options=context_options(pe, VOCAB))).eval()


def _learned_model(max_len=8):
    return TransformerLM(LMConfig(vocab_size=16, d_model=16, n_heads=2, n_layers=1,
                                  max_len=max_len, pe="learned")).eval()


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
    lost = model(ids[:, T - 1:], positions=torch.tensor([T - 1]), caches=caches)
    assert (lost - right).abs().max() > 1e-3
    if {"transform_qk", "score_bias"} & set(model.pe.hook_kinds()) and \
            not model.pe.position_free:                  # CoPE: the keys' order, no position
        caches = model.make_caches(1, T)
        model(ids[:, :T - 1], caches=caches)
        wrong = model(ids[:, T - 1:], positions=torch.tensor([T + 2]), caches=caches)
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


# ------------------------------------------------------------- config and input checks
@pytest.mark.parametrize("field,value,message", [
    ("dropout", "0.1", r"dropout must be a number in \[0.0, 1.0\), got '0.1'"),
    ("dropout", None, r"dropout must be a number in \[0.0, 1.0\), got None"),
    ("dropout", True, r"dropout must be a number"),
    ("pe_options", [("theta", 10.0)], r"pe_options must be a dict of encoding options"),
    ("pe_options", "theta=10", r"pe_options must be a dict"),
    ("pe", None, r"pe must be the name of an encoding"),
    ("bias", "no", r"bias must be True or False, got 'no'"),
    ("tie_embeddings", 1, r"tie_embeddings must be True or False"),
    ("attn_backend", "fast", r"attn_backend must be one of"),
])
def test_lm_config_values_are_checked(field, value, message):
    _raises(message, LMConfig, **{field: value})


def test_lm_config_pe_options_none_means_no_options():
    config = LMConfig(pe_options=None)
    assert config.pe_options == {}
    assert LMConfig.from_dict(config.to_dict()) == LMConfig()
    assert TransformerLM(LMConfig(d_model=16, n_heads=2, n_layers=1, pe_options=None))


def test_generate_checks_max_new_tokens():
    _raises(r"max_new_tokens must be an integer >= 0, got '2'", _lm().generate,
            torch.zeros(1, 2, dtype=torch.long), "2")


def test_generate_checks_its_prompt():
    _raises(r"ids must be \(batch, length\), got list", _lm().generate, [[1, 2]], 2)
    _raises(r"ids must be \(batch, length\), got shape \(2,\)", _lm().generate,
            torch.tensor([1, 2]), 2)


@pytest.mark.parametrize("d_model,n_heads", [(30, 4), (32, 5), (8, 16)])
def test_n_heads_must_divide_d_model(d_model, n_heads):
    with pytest.raises(ValueError, match=f"n_heads={n_heads} must divide d_model={d_model}"):
        LMConfig(d_model=d_model, n_heads=n_heads)
    with pytest.raises(ValueError, match="n_heads"):
        MultiHeadAttention(d_model, n_heads)


@pytest.mark.parametrize("field,value", [
    ("vocab_size", 0), ("n_layers", -1), ("max_len", 0), ("d_ff", 0), ("dropout", 1.0),
    ("norm_eps", 0.0), ("norm", "batchnorm"), ("activation", "tanh"),
    ("norm_placement", "middle"),
])
def test_bad_model_config_is_named(field, value):
    with pytest.raises(ValueError, match=field):
        TransformerLM(LMConfig(**{"d_model": 32, "n_heads": 4, field: value}))


def test_unknown_config_key_lists_valid_ones():
    with pytest.raises(ValueError, match="n_head.*valid:.*n_heads"):
        LMConfig.from_dict({"n_head": 4})


def test_ids_must_be_two_dimensional():
    with pytest.raises(ValueError, match=r"ids must be \(batch, length\)"):
        _learned_model()(torch.zeros(5, dtype=torch.long))


# -------------------------------------------------------------------- bfloat16 weights
@pytest.mark.parametrize("pe", list_encodings())
def test_every_encoding_runs_with_bfloat16_weights(pe):
    """A model cast to bfloat16 (weights and activations) runs forward and stays close to
    its float32 self: no dtype mismatch inside an encoding's own computation."""
    from posenc import LMConfig, TransformerLM
    from tests.helpers import context_options
    torch.manual_seed(0)
    model = TransformerLM(LMConfig(vocab_size=32, d_model=32, n_layers=1, n_heads=2,
                                   max_len=16, pe=pe,
                                   pe_options=context_options(pe, vocab_size=32))).eval()
    ids = torch.randint(0, 32, (2, 16))
    with torch.no_grad():
        want = model(ids)
        got = model.to(torch.bfloat16)(ids)
    assert got.dtype == torch.bfloat16
    assert (got.float() - want).abs().max() < 0.1 * want.abs().max() + 0.05


# ----------------------------------------------------------------- real batches
def _prompts(lengths, seed=1):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(1, 48, (n,), generator=gen) for n in lengths]


def _left_padded(prompts):
    """Prompts of different lengths as one left-padded batch (pad id 0) and its mask."""
    width = max(len(p) for p in prompts)
    ids = torch.zeros(len(prompts), width, dtype=torch.long)
    mask = torch.zeros(len(prompts), width, dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, width - len(p):], mask[i, width - len(p):] = p, 1
    return ids, mask


@pytest.mark.parametrize("name", list_encodings())
def test_left_padded_generation_equals_each_row_alone(name, tiny_lm):
    """Greedy tokens of a left-padded batch, with the KV cache and by full recomputes,
    are the tokens each prompt gets on its own."""
    model = tiny_lm(name, max_len=32)
    prompts = _prompts((5, 9, 3))
    ids, mask = _left_padded(prompts)
    batched = model.generate(ids, 6, attention_mask=mask)[:, -6:]
    alone = torch.stack([model.generate(p[None], 6)[0, -6:] for p in prompts])
    assert torch.equal(batched, alone)
    with torch.no_grad():                          # no cache: the whole batch each step
        for _ in range(6):
            nxt = model(ids, attention_mask=mask)[:, -1].argmax(-1, keepdim=True)
            ids, mask = torch.cat([ids, nxt], 1), torch.cat([mask, torch.ones_like(nxt)], 1)
    assert torch.equal(ids[:, -6:], alone)


@pytest.mark.parametrize("name", list_encodings())
@pytest.mark.parametrize("training", [False, True], ids=["eval", "train"])
def test_a_packed_row_equals_its_documents_run_alone(name, training, tiny_lm):
    """Documents packed into one row (document_ids) give each document's own logits, in
    evaluation and with gradients (the training backends: the fused CPU attention)."""
    model = tiny_lm(name, max_len=32).train(training)
    docs = _prompts((4, 7, 5), seed=2)
    row = torch.cat(docs)[None]
    document_ids = torch.cat([torch.full((len(d),), i) for i, d in enumerate(docs)])[None]
    with torch.set_grad_enabled(training):
        packed = model(row, document_ids=document_ids)
        alone = torch.cat([model(d[None]) for d in docs], dim=1)
    assert_close(packed, alone, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", list_encodings())
def test_positions_per_sequence_equal_looping_over_rows(name, tiny_lm):
    """(B, T) positions give each row what its own (T,) positions give."""
    model = tiny_lm(name, max_len=32)
    ids = torch.randint(0, 48, (3, 6), generator=torch.Generator().manual_seed(3))
    positions = torch.stack([torch.arange(6) + start for start in (0, 4, 11)])
    with torch.no_grad():
        batched = model(ids, positions=positions)
        rows = torch.cat([model(ids[i:i + 1], positions=positions[i]) for i in range(3)])
    assert_close(batched, rows, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", list_encodings())
def test_translation_invariant_encodings_read_one_shared_run(name, tiny_lm):
    """An encoding that says it is translation invariant gives the same logits when every
    position moves by one constant. For it, the model hands the layers the run 0..T-1 in
    place of the (B, T) positions of packed documents or padded rows, with the logits of
    those (B, T) positions at every token, padding included; padding between real tokens
    and every other encoding keep the (B, T) positions."""
    model = tiny_lm(name, max_len=32)
    invariant = model.pe.translation_invariant
    ids = torch.randint(0, 48, (2, 12), generator=torch.Generator().manual_seed(5))
    sides, inner = torch.ones(2, 12, dtype=torch.long), torch.ones(2, 12, dtype=torch.long)
    sides[0, :5], sides[1, 8:], inner[1, 3:6] = 0, 0, 0           # left, right; in between
    documents = torch.tensor([[0] * 4 + [1] * 8, [3] * 7 + [1] * 5])
    no_cache = torch.zeros(2, dtype=torch.long)
    cases = [({"attention_mask": sides}, positions_from_mask(sides.bool(), no_cache), invariant),
             ({"attention_mask": inner}, positions_from_mask(inner.bool(), no_cache), False),
             ({"document_ids": documents}, positions_from_documents(documents), invariant)]
    dims = []
    model.blocks[0].register_forward_pre_hook(lambda module, args: dims.append(args[1].pos.dim()))
    with torch.no_grad():
        if invariant:
            assert_close(model(ids, positions=torch.arange(12) + 9),
                         model(ids, positions=torch.arange(12)), atol=1e-5, rtol=1e-5)
        for kwargs, positions, shared in cases:
            dims.clear()
            got = model(ids, **kwargs)
            assert dims == [1 if shared else 2], kwargs
            assert_close(got, model(ids, positions=positions, **kwargs), atol=1e-5, rtol=1e-5)


def test_padding_positions_count_real_tokens_and_continue_in_the_cache(tiny_lm):
    model = tiny_lm("learned", max_len=32)
    ids, mask = _left_padded(_prompts((2, 4)))
    caches = model.make_caches(2, 8)
    with torch.no_grad():
        model(ids, attention_mask=mask, caches=caches)
        assert caches[0].positions().tolist() == [[0, 0, 0, 1], [0, 1, 2, 3]]
        assert caches[0].valid().tolist() == mask.bool().tolist()
        model(ids[:, :1], caches=caches)                        # continues per sequence
        assert caches[0].positions()[:, -1].tolist() == [2, 4]


@pytest.mark.parametrize("bad,message", [
    ({"attention_mask": torch.ones(2, 3)}, "attention_mask must be an integer or bool"),
    ({"attention_mask": torch.ones(2, 4, dtype=torch.long)}, r"attention_mask must have "
                                                            r"shape \(2, 3\)"),
    ({"document_ids": torch.zeros(2, 3)}, "document_ids must be an integer tensor"),
    ({"document_ids": torch.zeros(1, 3, dtype=torch.long)}, r"document_ids must have "
                                                            r"shape \(2, 3\)"),
])
def test_bad_masks_are_refused(bad, message):
    with pytest.raises(ValueError, match=message):
        _lm()(torch.zeros(2, 3, dtype=torch.long), **bad)


def test_documents_and_caches_are_refused_together():
    model = _lm()
    with pytest.raises(ValueError, match="cannot be combined with KV caches"):
        model(torch.zeros(1, 3, dtype=torch.long), caches=model.make_caches(1, 3),
              document_ids=torch.zeros(1, 3, dtype=torch.long))


@pytest.mark.parametrize("name", list_encodings())
def test_every_encoding_builds_from_its_name_alone(name):
    """What an encoding needs to know about the model (vocab_size for complex_order) comes
    from the model's config."""
    model = TransformerLM(LMConfig(vocab_size=40, d_model=16, n_heads=2, n_layers=1, pe=name))
    assert model(torch.randint(0, 40, (1, 5))).shape == (1, 5, 40)
    if name == "complex_order":
        assert model.pe.vocab_size == 40
        given = TransformerLM(LMConfig(vocab_size=40, d_model=16, n_heads=2, n_layers=1,
                                       pe=name, pe_options={"vocab_size": 64}))
        assert given.pe.vocab_size == 64                         # the user's value wins


@pytest.mark.parametrize("shape", [(0, 4), (2, 0), (0, 0)])
def test_generate_refuses_an_empty_batch_or_prompt(shape):
    model = TransformerLM(LMConfig(vocab_size=16, d_model=16, n_heads=2, n_layers=1)).eval()
    _raises("ids must hold at least one prompt of at least one token",
            model.generate, torch.zeros(shape, dtype=torch.long), 2)


@pytest.mark.parametrize("args,message", [((-1, 8), "batch must be an integer >= 1"),
                                          ((0, 8), "batch must be an integer >= 1"),
                                          ((2, 0), "capacity must be an integer >= 1"),
                                          ((2.0, 8), "batch must be an integer")])
def test_make_caches_checks_its_arguments(args, message):
    model = TransformerLM(LMConfig(vocab_size=16, d_model=16, n_heads=2, n_layers=1))
    _raises(message, model.make_caches, *args)


def test_caches_of_another_batch_size_are_refused():
    model = TransformerLM(LMConfig(vocab_size=16, d_model=16, n_heads=2, n_layers=1)).eval()
    caches = model.make_caches(2, 32)
    with torch.no_grad():
        _raises(r"caches\[0\] holds 2 sequences of 2 heads of dim 8, but layer 0 needs 3 of "
                r"2 of dim 8; make the caches with this model's make_caches\(3, capacity\)",
                model, torch.zeros(3, 4, dtype=torch.long), caches=caches)
        model(torch.zeros(2, 4, dtype=torch.long), caches=caches)   # the right batch runs


def test_caches_made_by_another_model_are_refused_naming_the_layer():
    """A windowed plan's caches in a plain model (and the reverse), too few or too many
    caches, a wrong type or another head shape: one line each, before any forward work."""
    plain = TransformerLM(LMConfig(vocab_size=16, d_model=16, n_heads=2, n_layers=2)).eval()
    windowed = TransformerLM(LMConfig(vocab_size=16, d_model=16, n_heads=2, n_layers=2,
                                      plan="gemma3", max_len=64)).eval()
    wide = TransformerLM(LMConfig(vocab_size=16, d_model=16, n_heads=4, n_layers=2)).eval()
    ids = torch.zeros(1, 4, dtype=torch.long)
    with torch.no_grad():
        assert windowed.specs[0].window is not None
        _raises(r"caches\[0\] was made for a layer with window .*, but layer 0 has "
                r"window None", plain, ids, caches=windowed.make_caches(1, 8))
        _raises(r"caches\[0\] was made for a layer with window None, but layer 0 has "
                r"window .*", windowed, ids, caches=plain.make_caches(1, 8))
        _raises("caches holds 1 caches but the model has 2 layers", plain, ids,
                caches=plain.make_caches(1, 8)[:1])
        _raises("caches holds 3 caches but the model has 2 layers", plain, ids,
                caches=plain.make_caches(1, 8) + plain.make_caches(1, 8)[:1])
        _raises(r"caches\[1\] is a str, not a KVCache", plain, ids,
                caches=[plain.make_caches(1, 8)[0], "cache"])
        _raises("caches must be a list of one KVCache per layer, got dict", plain, ids,
                caches={})
        _raises(r"caches\[0\] holds 1 sequences of 4 heads of dim 4, but layer 0 needs 1 "
                r"of 2 of dim 8", plain, ids, caches=wide.make_caches(1, 8))


@pytest.mark.parametrize("name", list_encodings())
@pytest.mark.parametrize("train", [False, True])
def test_an_empty_batch_is_refused_in_one_line_by_every_encodings_model(name, train, tiny_lm):
    model = tiny_lm(name, max_len=T).train(train)
    _raises(r"ids must hold at least one sequence \(batch >= 1\), got shape \(0, 8\)",
            model, torch.zeros(0, 8, dtype=torch.long))
