"""The relative family (shaw, xl, deberta, tupe): formulas, properties, backends, caches.

The DeBERTa formula itself is checked against Hugging Face in test_deberta_oracle.py.
"""

import math
import warnings

import pytest
import torch
from torch.nn.attention.flex_attention import flex_attention

from posenc.attention import attend, backends, choose_backend
from posenc.encodings import build_encoding, describe_encodings, relative_shift
from posenc.encodings.sinusoidal import sinusoidal_at
from posenc.encodings.t5 import relative_position_bucket
from posenc.models.lm import LMConfig, TransformerLM
from posenc.models.seq2seq import Seq2SeqTransformer
from posenc.models.seq2seq_config import Seq2SeqConfig

H, D = 2, 8
#: small options so that short sequences reach the clipping and bucketing regimes
CASES = [
    ("shaw", {"max_relative_position": 3}),
    ("shaw", {"max_relative_position": 3, "table": "sinusoidal"}),
    ("shaw", {"max_relative_position": 3, "relative_values": False}),
    ("xl", {}),
    ("xl", {"position_term": "rotary"}),
    ("deberta", {"position_buckets": 4, "max_relative_positions": 8}),
    ("deberta", {"position_buckets": None, "max_relative_positions": 5,
                 "pos_att_type": "c2p", "absolute_query": True}),
    ("tupe", {"num_buckets": 8, "max_distance": 16}),
    ("tupe", {"num_buckets": 8, "max_distance": 16, "bidirectional": True}),
]
CASE_IDS = [f"{n}-{'-'.join(f'{k}={v}' for k, v in o.items())}" for n, o in CASES]
Q_POS = torch.tensor([4, 5, 9])                  # a cache-like query block, Lq != Lk
K_POS = torch.tensor([0, 1, 2, 4, 5, 9, 12])


def boost(module: torch.nn.Module, std: float = 0.5) -> None:
    """Move parameters off their small init so position terms are as large as content."""
    torch.manual_seed(1)
    with torch.no_grad():
        for p in module.parameters():
            p.normal_(0.0, std)


def make(name, options, max_len=64):
    pe = build_encoding(name, n_heads=H, head_dim=D, max_len=max_len, **options)
    boost(pe)
    return pe


def qkv(lq, lk, batch=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(batch, H, lq, D, generator=g), torch.randn(batch, H, lk, D, generator=g),
            torch.randn(batch, H, lk, D, generator=g))


def weights(pe, q, k, v, q_pos, k_pos, causal):
    """Eager attention weights (B, H, Lq, Lk) after the encoding's transform."""
    q, k = pe.transform_qk(q, k, q_pos, k_pos)
    return attend(q, k, v, pe, q_pos, k_pos, causal=causal, need_weights=True)[1]


# ----------------------------------------------------------------- the formulas
def test_shaw_matches_the_paper_formula():
    k_clip = 3
    for table in ("learned", "sinusoidal"):
        pe = make("shaw", {"max_relative_position": k_clip, "table": table})
        q, k, v = qkv(3, 7)
        out, _ = attend(q, k, v, pe, Q_POS, K_POS, causal=True, backend="eager")
        rel = (K_POS[None, :] - Q_POS[:, None]).clamp(-k_clip, k_clip) + k_clip   # (Lq, Lk)
        a_k = pe.key_table[rel]                                                   # (Lq, Lk, D)
        a_v = a_k if table == "sinusoidal" else pe.value_table[rel]
        if table == "sinusoidal":
            torch.testing.assert_close(pe.key_table,
                                       sinusoidal_at(torch.arange(-k_clip, k_clip + 1), D))
        logits = (q @ k.transpose(-2, -1) + torch.einsum("bhid,ijd->bhij", q, a_k)) / math.sqrt(D)
        logits = logits.masked_fill(K_POS[None, :] > Q_POS[:, None], float("-inf"))
        w = logits.softmax(-1)
        want = w @ v + torch.einsum("bhij,ijd->bhid", w, a_v)
        torch.testing.assert_close(out, want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("position_term", ["table", "rotary"])
def test_xl_matches_the_paper_formula_at_large_positions(position_term):
    pe = make("xl", {"position_term": position_term})
    q, k, v = qkv(3, 5)
    q_pos, k_pos = torch.tensor([7, 3, 5000]), torch.tensor([0, 2, 5, 4990, 5003])
    got = weights(pe, q, k, v, q_pos, k_pos, causal=False)
    r = sinusoidal_at((q_pos[:, None] - k_pos[None, :]).flatten(), H * D).view(3, 5, H * D)
    rk = (r @ pe.pos_proj.weight.t()).view(3, 5, H, D).permute(2, 0, 1, 3)    # (H, Lq, Lk, D)
    logits = (q @ k.transpose(-2, -1)                                         # content
              + torch.einsum("bhid,hijd->bhij", q, rk)                         # content-position
              + torch.einsum("hd,bhjd->bhj", pe.u, k)[:, :, None]              # global content
              + torch.einsum("hd,hijd->hij", pe.v, rk)) / math.sqrt(D)         # global position
    torch.testing.assert_close(got, logits.softmax(-1), atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("bidirectional", [False, True])
def test_tupe_matches_the_paper_formula(bidirectional):
    pe = make("tupe", {"num_buckets": 8, "max_distance": 16, "bidirectional": bidirectional})
    q, k, v = qkv(3, 7)
    got = weights(pe, q, k, v, Q_POS, K_POS, causal=False)

    def untied(pos, proj_rows):
        p = torch.nn.functional.layer_norm(pe.absolute.table[pos], (H * D,),
                                           pe.pos_norm.weight, pe.pos_norm.bias)
        out = p @ pe.pos_proj.weight[proj_rows].t() + pe.pos_proj.bias[proj_rows]
        return out.view(-1, H, D).transpose(0, 1)                            # (H, L, D)

    pq, pk = untied(Q_POS, slice(0, H * D)), untied(K_POS, slice(H * D, 2 * H * D))
    bucket = relative_position_bucket(K_POS[None, :] - Q_POS[:, None], bidirectional, 8, 16)
    logits = ((q @ k.transpose(-2, -1) + pq @ pk.transpose(-2, -1)) / math.sqrt(2 * D)
              + pe.bias.weight[bucket].permute(2, 0, 1))
    torch.testing.assert_close(got, logits.softmax(-1), atol=1e-6, rtol=1e-5)


def test_deberta_absolute_query_adds_a_learned_position_to_queries_only():
    pe = make("deberta", {"position_buckets": 4, "max_relative_positions": 8,
                          "absolute_query": True}, max_len=16)
    q, k, _ = qkv(3, 7)
    q2, k2 = pe.transform_qk(q, k, Q_POS, K_POS)
    torch.testing.assert_close(q2, q + pe.absolute.table[Q_POS].view(3, H, D).transpose(0, 1))
    assert k2 is k
    with pytest.raises(ValueError, match="max_len=16"):
        pe.transform_qk(q, k, torch.tensor([16]), K_POS)
    assert pe.sm_scale() == pytest.approx(1 / math.sqrt(3 * D))
    one_term = make("deberta", {"pos_att_type": "p2c"})
    assert one_term.sm_scale() == pytest.approx(1 / math.sqrt(2 * D))


# --------------------------------------------------------------- the properties
def test_shaw_clips_distances_beyond_k():
    k_clip = 3
    pe = make("shaw", {"max_relative_position": k_clip})
    q = torch.randn(1, H, 1, D)
    q_pos, k_pos = torch.tensor([20]), torch.arange(41)
    bias = pe.score_bias(q, q, q_pos, k_pos)[0, :, 0]                         # (H, 41)
    dist = k_pos - 20
    for far in (dist <= -k_clip, dist >= k_clip):
        torch.testing.assert_close(bias[:, far], bias[:, far][:, :1].expand(-1, int(far.sum())))
    inside = bias[:, (dist > -k_clip - 1) & (dist < k_clip + 1)]              # 2K+1 distinct
    assert all(len(set(row.tolist())) == 2 * k_clip + 1 for row in inside)
    # value term: all weight on one key gives that key's clipped value embedding
    for j in (0, 18, 20, 23, 40):
        w = torch.zeros(1, H, 1, 41)
        w[..., j] = 1.0
        want = pe.value_table[max(-k_clip, min(k_clip, j - 20)) + k_clip]
        torch.testing.assert_close(pe.value_term(w, q_pos, k_pos)[0, :, 0], want.expand(H, D))


@pytest.mark.parametrize("name,options", CASES, ids=CASE_IDS)
def test_translation_invariance_where_it_holds(name, options):
    """Shifting every position changes nothing for pure relative encodings; TUPE's and
    DeBERTa's absolute terms do depend on the shift (so the test can tell)."""
    pe = make(name, options)
    q, k, v = qkv(3, 7)
    base = weights(pe, q, k, v, Q_POS, K_POS, causal=True)
    shifted = weights(pe, q, k, v, Q_POS + 11, K_POS + 11, causal=True)
    if name == "tupe" or options.get("absolute_query"):
        assert not torch.allclose(base, shifted, atol=1e-3)
    else:
        torch.testing.assert_close(shifted, base, atol=1e-5, rtol=1e-5)


def test_tupe_bidirectional_changes_only_keys_after_the_query():
    q, k, _ = qkv(3, 7)
    uni = make("tupe", {"num_buckets": 8, "max_distance": 16}).score_bias(q, k, Q_POS, K_POS)
    bi = make("tupe", {"num_buckets": 8, "max_distance": 16,
                       "bidirectional": True}).score_bias(q, k, Q_POS, K_POS)
    after = (K_POS[None, :] > Q_POS[:, None]).expand_as(uni[0])
    assert not torch.allclose(uni[0][after], bi[0][after])
    assert not torch.allclose(uni[0][~after], bi[0][~after])   # buckets move too (halved)


# ------------------------------------------------------------------ backends
def test_capabilities_in_the_listing():
    rows = {r["name"]: r for r in describe_encodings()}
    assert rows["shaw"]["backends"] == ["eager"]
    assert "value_term" in rows["shaw"]["hooks"]
    for name in ("xl", "deberta", "tupe"):
        assert rows[name]["backends"] == ["sdpa", "flex", "eager"]
        assert rows[name]["family"] == "relative"
    shaw = build_encoding("shaw", n_heads=H, head_dim=D)
    for backend in ("sdpa", "flex"):
        with pytest.raises(ValueError, match="supports: eager"):
            choose_backend(shaw, backend, k_len=8)
    keys_only = build_encoding("shaw", n_heads=H, head_dim=D, relative_values=False)
    assert keys_only.backends() == ("sdpa", "flex", "eager")


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("name,options", CASES, ids=CASE_IDS)
def test_backends_agree_with_eager(name, options, causal, monkeypatch):
    """Every backend the encoding offers gives eager's output. FlexAttention runs uncompiled
    here (same score_mod, same masks; one compiled run is below): compiling per case costs
    seconds each on CPU."""
    monkeypatch.setattr(backends, "_compiled_flex", lambda: flex_attention)
    pe = make(name, options)
    q, k, v = qkv(3, 7)
    with torch.no_grad():
        q, k = pe.transform_qk(q, k, Q_POS, K_POS)
        want, _ = attend(q, k, v, pe, Q_POS, K_POS, causal=causal, backend="eager")
        for backend in pe.backends():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)     # "without torch.compile"
                got, _ = attend(q, k, v, pe, Q_POS, K_POS, causal=causal, backend=backend)
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_compiled_flex_agrees_with_eager_for_deberta():
    """One compiled FlexAttention run (CPU compiles cost seconds): the DeBERTa score_mod
    gathers c2p and p2c through the distance table inside the kernel. Lengths are
    multiples of 128, the CPU kernel's block size."""
    pe = make("deberta", {"position_buckets": 8, "max_relative_positions": 64})
    q, k, v = qkv(128, 256, batch=1)
    q_pos, k_pos = torch.arange(128, 256), torch.arange(256)
    with torch.no_grad():
        want, _ = attend(q, k, v, pe, q_pos, k_pos, causal=True, backend="eager")
        got, _ = attend(q, k, v, pe, q_pos, k_pos, causal=True, backend="flex")
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name,options", [c for c in CASES if c[0] != "xl"],
                         ids=[i for i, c in zip(CASE_IDS, CASES) if c[0] != "xl"])
def test_score_mod_tables_are_linear_in_length(name, options):
    """What a score_mod captures grows like n, never like (H, n, n)."""
    n = 256
    pe = make(name, options, max_len=n)
    q, k, _ = qkv(n, n, batch=1)
    pos = torch.arange(n)
    q, k = pe.transform_qk(q, k, pos, pos)
    mod = pe.score_mod(q, k, pos, pos)
    captured = [c.cell_contents for c in mod.__closure__ or ()
                if isinstance(c.cell_contents, torch.Tensor)]
    assert captured
    for t in captured:
        assert t.numel() <= 2 * H * n * 16, tuple(t.shape)      # widest: (1, H, n, 2 span)


@pytest.mark.parametrize("name,width", [("xl", D + H * D), ("tupe", 2 * D)])
def test_untied_terms_widen_q_and_k_not_the_scores(name, width):
    pe = make(name, {"position_term": "rotary"} if name == "xl" else {})
    q, k, _ = qkv(5, 9)
    q2, k2 = pe.transform_qk(q, k, torch.arange(4, 9), torch.arange(9))
    assert q2.shape == (2, H, 5, width) and k2.shape == (2, H, 9, width)
    if name == "xl":
        assert pe.score_bias(q2, k2, torch.arange(4, 9), torch.arange(9)) is None
    assert pe.cache_transformed_keys is False


@pytest.mark.parametrize("causal", [True, False])
def test_xl_forms_agree_under_logn_scaling(causal):
    """Log-n multiplies the whole q-side of the logits, (q + u).k and (q + v).R, in both
    forms; checked against the rotary form, whose widened q.k is scaled as a whole."""
    q, k, v = qkv(5, 9)
    q_pos, k_pos = torch.arange(4, 9), torch.arange(9)
    outs = []
    for form in ("table", "rotary"):
        pe = make("xl", {"position_term": form, "logn_base_len": 2})
        outs.append(attend(*pe.transform_qk(q, k, q_pos, k_pos), v, pe, q_pos, k_pos,
                           causal=causal, backend="eager")[0])
    torch.testing.assert_close(outs[0], outs[1], atol=1e-5, rtol=1e-5)


def test_xl_auto_trains_on_the_table_and_evaluates_long_contexts_rotary(monkeypatch):
    """position_term="auto": the table while gradients are recorded or keys are few, the
    rotary form (no Lq x Lk table, flex-friendly) for gradient-free long attention; both give
    the same attention output."""
    monkeypatch.setattr(backends, "FLEX_MIN_LEN", 8)
    pe = make("xl", {})
    q, k, v = qkv(5, 9)
    q_pos, k_pos = torch.arange(4, 9), torch.arange(9)
    assert pe.transform_qk(q, k, q_pos, k_pos)[0].shape[-1] == D                # table
    with torch.no_grad():
        assert pe.transform_qk(q, k, q_pos, k_pos)[0].shape[-1] == D + H * D    # rotary
        assert pe.transform_qk(q, k[:, :, :7], q_pos, k_pos[:7])[0].shape[-1] == D
        long = attend(*pe.transform_qk(q, k, q_pos, k_pos), v, pe, q_pos, k_pos,
                      causal=True, backend="eager")[0]
    short = attend(*pe.transform_qk(q, k, q_pos, k_pos), v, pe, q_pos, k_pos, causal=True,
                   backend="eager")[0]
    torch.testing.assert_close(long, short.detach(), atol=1e-5, rtol=1e-5)


# ---------------------------------------------------------------- the models
def tiny_lm(name, options):
    model = TransformerLM(LMConfig(vocab_size=32, d_model=H * D, n_layers=2, n_heads=H,
                                   max_len=32, pe=name, pe_options=options)).eval()
    for module in model.modules():
        if module is not model and hasattr(module, "score_bias"):     # every encoding
            boost(module)
    return model


@pytest.mark.parametrize("name,options", CASES, ids=CASE_IDS)
def test_cached_decoding_equals_full_forward(name, options):
    model = tiny_lm(name, options)
    ids = torch.randint(0, 32, (2, 14), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        full = model(ids)
        caches = model.make_caches(2, 14)
        steps = [model(ids[:, :5], caches=caches), model(ids[:, 5:8], caches=caches)]
        steps += [model(ids[:, t:t + 1], caches=caches) for t in range(8, 14)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name,options", CASES, ids=CASE_IDS)
def test_gradients_reach_every_encoding_parameter(name, options):
    model = tiny_lm(name, options).train()
    ids = torch.randint(0, 32, (2, 12), generator=torch.Generator().manual_seed(0))
    logits = model(ids)
    torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten()).backward()
    used = [b.layer_pe for b in model.blocks] if model.pe.per_layer else [model.pe]
    params = [(n, p) for pe in used for n, p in pe.named_parameters()]
    if name == "shaw" and options.get("table") == "sinusoidal":
        assert not params                                          # fixed tables
    for n, p in params:
        assert p.grad is not None and p.grad.abs().sum() > 0, n


@pytest.mark.parametrize("name", ["shaw", "xl", "deberta", "tupe"])
def test_encoder_decoder_with_bidirectional_encoder(name):
    options = {"shaw": {"max_relative_position": 3},
               "deberta": {"position_buckets": 4, "max_relative_positions": 8},
               "tupe": {"num_buckets": 8, "max_distance": 16}, "xl": {}}[name]
    torch.manual_seed(0)
    model = Seq2SeqTransformer(Seq2SeqConfig(
        vocab_size=16, d_model=H * D, n_heads=H, n_encoder_layers=1, n_decoder_layers=1,
        max_len=32, encoder_pe=name, encoder_pe_options=options)).eval()
    src = torch.randint(2, 16, (2, 9), generator=torch.Generator().manual_seed(0))
    cached = model.generate(src, 6, bos_id=1)
    torch.testing.assert_close(cached, model.generate(src, 6, bos_id=1, use_cache=False))


# --------------------------------------------------------------- bad options
@pytest.mark.parametrize("name,options,match", [
    ("shaw", {"max_relative_position": 0}, r"max_relative_position must be an integer >= 1"),
    ("shaw", {"max_relative_position": 2.5}, r"max_relative_position must be an integer"),
    ("shaw", {"table": "fixed"}, r"table must be one of 'learned', 'sinusoidal'"),
    ("shaw", {"relative_values": "yes"}, r"relative_values must be True or False"),
    ("shaw", {"init_std": 0.0}, r"init_std must be a number in \(0.0, inf\)"),
    ("shaw", {"bidirectional": True}, r"unknown option\(s\) bidirectional .*valid options"),
    ("xl", {"base": 0.5}, r"base must be a number in \(1.0, inf\)"),
    ("xl", {"position_term": "fast"}, r"position_term must be one of 'auto', 'table'"),
    ("deberta", {"position_buckets": 1}, r"position_buckets must be an integer >= 2"),
    ("deberta", {"max_relative_positions": 0}, r"max_relative_positions must be an integer >= 1"),
    ("deberta", {"position_buckets": 8, "max_relative_positions": 5},
     r"max_relative_positions must be > position_buckets // 2 \+ 1 = 5"),
    ("deberta", {"pos_att_type": "c2p|p2p"}, r"pos_att_type must be 'c2p\|p2c', 'c2p' or"),
    ("deberta", {"pos_att_type": "c2p|c2p"}, r"pos_att_type must be"),
    ("deberta", {"rel_layer_norm": 1}, r"rel_layer_norm must be True or False"),
    ("tupe", {"num_buckets": 1}, r"num_buckets must be an integer >= 2"),
    ("tupe", {"num_buckets": 8, "max_distance": 2}, r"max_distance must be > 4"),
])
def test_bad_options_raise_naming_the_option(name, options, match):
    with pytest.raises(ValueError, match=match):
        build_encoding(name, n_heads=H, head_dim=D, max_len=32, **options)


def test_options_needing_max_len_or_even_width():
    with pytest.raises(ValueError, match="tupe needs max_len"):
        build_encoding("tupe", n_heads=H, head_dim=D)
    with pytest.raises(ValueError, match="absolute_query needs max_len"):
        build_encoding("deberta", n_heads=H, head_dim=D, absolute_query=True)
    with pytest.raises(ValueError, match="xl needs an even n_heads \\* head_dim"):
        build_encoding("xl", n_heads=1, head_dim=3)
    pe = build_encoding("tupe", n_heads=H, head_dim=D, max_len=8)
    q, k, _ = qkv(1, 9)
    with pytest.raises(ValueError, match=r"positions must be in \[0, 8\)"):
        pe.transform_qk(q, k, torch.tensor([8]), torch.arange(9))


# ------------------------------------------------------------- fast paths
def test_sliding_window_reads_the_relative_shift():
    table = torch.arange(2 * 4 * 9.0).view(2, 4, 9)
    got = relative_shift.sliding_window(table, 5, 3, -1)                # (2, 4, 5)
    rows = torch.arange(4)[:, None]
    torch.testing.assert_close(got, table[:, rows, 3 - rows + torch.arange(5)])
    with pytest.raises(ValueError, match="leaves the 9 columns"):
        relative_shift.sliding_window(table, 5, 2, -1)
    assert relative_shift.is_range(torch.arange(3, 9))
    assert not relative_shift.is_range(K_POS) and not relative_shift.is_range(Q_POS)


def deberta_gathered_bias(pe, q, k, q_pos, k_pos):
    """The gather formulation over the 2 span table rows (the path for any positions)."""
    rows, lo = pe.bucket_rows(q_pos, k_pos)
    r = rows[q_pos[:, None] - k_pos[None, :] - lo]                             # (Lq, Lk)
    c2p, p2c = pe.term_tables(q, k)
    bias = 0
    if c2p is not None:
        bias = bias + c2p[:, :, torch.arange(len(q_pos))[:, None], r]
    if p2c is not None:
        bias = bias + p2c[:, :, torch.arange(len(k_pos))[None, :], r]
    return bias


@pytest.mark.parametrize("options", [
    {"position_buckets": 8, "max_relative_positions": 16},
    {"position_buckets": None, "max_relative_positions": 9, "pos_att_type": "c2p"},
    {"position_buckets": 8, "max_relative_positions": 16, "pos_att_type": "p2c"},
], ids=["both", "c2p-raw", "p2c"])
def test_deberta_strided_bias_equals_the_gathered_one(options):
    """Consecutive positions read the bias through strided views of distance tables; values
    and gradients equal the gather formulation, prefill with an offset included."""
    pe = make("deberta", options)
    for lq, lk, q0, k0 in [(7, 7, 0, 0), (3, 7, 4, 0), (1, 9, 8, 0), (6, 4, 2, 5)]:
        q, k, _ = qkv(lq, lk)
        q.requires_grad_(True)
        k.requires_grad_(True)
        q_pos, k_pos = torch.arange(q0, q0 + lq), torch.arange(k0, k0 + lk)
        assert pe.bucket_rows(q_pos, k_pos)[0].numel() <= 2 * pe.span   # the strided path
        grad = torch.randn(2, H, lq, lk)
        got = pe.score_bias(q, k, q_pos, k_pos)
        want = deberta_gathered_bias(pe, q, k, q_pos, k_pos)
        torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-5)
        got_grads = torch.autograd.grad(got, [q, k, *pe.parameters()], grad, allow_unused=True)
        want_grads = torch.autograd.grad(want, [q, k, *pe.parameters()], grad, allow_unused=True)
        for g, w in zip(got_grads, want_grads):
            if w is None:
                assert g is None
            else:
                torch.testing.assert_close(g, w, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name,options", [
    ("deberta", {"position_buckets": 4, "max_relative_positions": 8}),
    ("shaw", {"max_relative_position": 3, "relative_values": False}),
    ("xl", {}),
], ids=["deberta", "shaw-keys", "xl"])
@pytest.mark.parametrize("causal", [True, False])
def test_eager_gradients_equal_sdpa(name, options, causal):
    """Eager folds the scale, bias and causal mask into one fused matmul (an additive -inf
    mask); its gradients equal sdpa's, for q, k, v and the encoding's parameters."""
    pe = make(name, options)
    q, k, v = qkv(7, 7)
    pos = torch.arange(7)
    grad = torch.randn(2, H, 7, D)
    results = []
    for backend in ("eager", "sdpa"):
        inputs = [t.clone().requires_grad_(True) for t in (q, k, v)]
        qt, kt = pe.transform_qk(inputs[0], inputs[1], pos, pos)
        out, _ = attend(qt, kt, inputs[2], pe, pos, pos, causal=causal, backend=backend)
        results.append((out, torch.autograd.grad(out, [*inputs, *pe.parameters()], grad)))
    (out, grads), (want, want_grads) = results
    torch.testing.assert_close(out, want, atol=1e-5, rtol=1e-5)
    for g, w in zip(grads, want_grads):
        torch.testing.assert_close(g, w, atol=1e-5, rtol=1e-5)
