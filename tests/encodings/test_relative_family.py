"""What the relative family (shaw, xl, deberta, tupe) guarantees: translation invariance
where it holds, backends and cached decoding that agree with eager and full forward passes,
score_mod tables linear in length, gradients, options named."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch.nn.attention.flex_attention import flex_attention

from posenc.attention import attend, backends, choose_backend
from posenc.attention.context import AttentionCall
from posenc.attention.routing import RoutingFacts
from posenc.encodings import build_encoding, describe_encodings
from posenc.encodings.context import HookContext
from posenc.models.lm import LMConfig, TransformerLM
from tests.encodings.helpers import K_POS, Q_POS, D, H, boost, make, qkv, weights

pytestmark = pytest.mark.usefixtures("single_thread")


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


def tiny_lm(name, options):
    model = TransformerLM(LMConfig(vocab_size=32, d_model=H * D, n_layers=2, n_heads=H,
                                   max_len=32, pe=name, pe_options=options)).eval()
    for module in model.modules():
        if module is not model and hasattr(module, "score_bias"):     # every encoding
            boost(module)
    return model


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
            choose_backend(shaw.backends(), shaw.has_bias,
                           RoutingFacts(requested=backend, k_len=8))
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
    if not causal and getattr(pe, "bidirectional", True) is False:     # a decoder form
        with pytest.raises(ValueError, match="built for causal attention"):
            pe.score_bias(q, k, HookContext.for_positions(Q_POS, K_POS, causal=causal))
        return
    with torch.no_grad():
        q, k = pe.transform_qk(q, k, HookContext.for_positions(Q_POS, K_POS))
        want, _ = attend(q, k, v, pe,
                         AttentionCall.for_positions(Q_POS, K_POS, causal=causal, backend="eager"))
        for backend in pe.backends():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)     # "without torch.compile"
                call = AttentionCall.for_positions(Q_POS, K_POS, causal=causal,
                                                   backend=backend)
                got, _ = attend(q, k, v, pe, call)
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def _captured_tensors(fn, seen=None) -> list:
    """Tensors a function holds in its closure, also through the functions it holds."""
    seen = set() if seen is None else seen
    found = []
    for cell in getattr(fn, "__closure__", None) or ():
        value = cell.cell_contents
        if isinstance(value, torch.Tensor):
            found.append(value)
        elif callable(value) and id(value) not in seen:
            seen.add(id(value))
            found += _captured_tensors(value, seen)
    return found


@pytest.mark.parametrize("name,options", [c for c in CASES if c[0] != "xl"],
                         ids=[i for i, c in zip(CASE_IDS, CASES) if c[0] != "xl"])
def test_score_mod_tables_are_linear_in_length(name, options):
    """What a score_mod captures grows like n, never like (H, n, n)."""
    n = 256
    pe = make(name, options, max_len=n)
    q, k, _ = qkv(n, n, batch=1)
    pos = torch.arange(n)
    q, k = pe.transform_qk(q, k, HookContext.for_positions(pos, pos))
    mod = pe.score_mod(q, k, HookContext.for_positions(pos, pos, causal=True))
    captured = _captured_tensors(mod)
    assert captured
    for t in captured:
        assert t.numel() <= 2 * H * n * 16, tuple(t.shape)      # widest: (1, H, n, 2 span)


@pytest.mark.parametrize("name,width", [("xl", D + H * D), ("tupe", 2 * D)])
def test_untied_terms_widen_q_and_k_not_the_scores(name, width):
    pe = make(name, {"position_term": "rotary"} if name == "xl" else {})
    q, k, _ = qkv(5, 9)
    q2, k2 = pe.transform_qk(q, k, HookContext.for_positions(torch.arange(4, 9), torch.arange(9)))
    assert q2.shape == (2, H, 5, width) and k2.shape == (2, H, 9, width)
    if name == "xl":
        assert pe.score_bias(q2, k2,
                             HookContext.for_positions(torch.arange(4, 9),
                                                       torch.arange(9))) is None
    assert pe.cache_transformed_keys is False


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
    torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1),
                                      ids[:, 1:].flatten()).backward()
    used = [b.layer_pe for b in model.blocks] if model.pe.per_layer else [model.pe]
    params = [(n, p) for pe in used for n, p in pe.named_parameters()]
    if name == "shaw" and options.get("table") == "sinusoidal":
        assert not params                                          # fixed tables
    for n, p in params:
        assert p.grad is not None and p.grad.abs().sum() > 0, n


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
        pe.transform_qk(q, k, HookContext.for_positions(torch.tensor([8]), torch.arange(9)))


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
        qt, kt = pe.transform_qk(inputs[0], inputs[1], HookContext.for_positions(pos, pos))
        out, _ = attend(qt, kt, inputs[2], pe,
                        AttentionCall.for_positions(pos, pos, causal=causal, backend=backend))
        results.append((out, torch.autograd.grad(out, [*inputs, *pe.parameters()], grad)))
    (out, grads), (want, want_grads) = results
    torch.testing.assert_close(out, want, atol=1e-5, rtol=1e-5)
    for g, w in zip(grads, want_grads):
        torch.testing.assert_close(g, w, atol=1e-5, rtol=1e-5)
