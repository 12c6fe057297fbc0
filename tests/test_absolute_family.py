"""Absolute encodings beyond the core: multiplicative, hierarchical, recurrent, floater,
complex_order and conv. Properties of each, cached decoding, gradients and option errors."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from posenc import LMConfig, TransformerLM, build_encoding
from posenc.encodings.hierarchical import (HierarchicalEncoding, extend_learned_model,
                                           hierarchical_positions)
from posenc.encodings.sinusoidal import sinusoidal_at

H, D = 2, 4
C = H * D
V = 48

CASES = [
    ("multiplicative", {}),
    ("multiplicative", {"positions": "sinusoidal"}),
    ("hierarchical", {"base_len": 6}),
    ("recurrent", {}),
    ("floater", {}),
    ("floater", {"method": "dopri5", "rtol": 1e-6, "atol": 1e-8}),
    ("complex_order", {"vocab_size": V}),
    ("conv", {"kernel_size": 3}),
]


def _pe(name, **options):
    return build_encoding(name, n_heads=H, head_dim=D, max_len=32, **options)


def _decode(model, ids, prefill):
    """Logits from a prefill of ``prefill`` tokens, then one token at a time."""
    caches = model.make_caches(ids.shape[0], ids.shape[1])
    parts = [model(ids[:, :prefill], caches=caches)]
    parts += [model(ids[:, i:i + 1], caches=caches) for i in range(prefill, ids.shape[1])]
    return torch.cat(parts, dim=1)


# ------------------------------------------------------------------ shared guarantees
@pytest.mark.parametrize("name,options", CASES, ids=str)
def test_cached_decoding_equals_full_forward(name, options, tiny_lm):
    model = tiny_lm(name, options, max_len=32)
    ids = torch.randint(0, V, (2, 14))
    with torch.no_grad():
        full = model(ids)
        assert_close(_decode(model, ids, prefill=5), full, atol=1e-5, rtol=1e-5)
        assert_close(model(ids, backend="eager"), full, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name,options", CASES, ids=str)
def test_gradients_reach_every_parameter(name, options, tiny_lm):
    model = tiny_lm(name, options, max_len=32).train()
    model(torch.randint(0, V, (2, 10))).logsumexp(-1).mean().backward()
    params = dict(model.pe.named_parameters())
    assert params or options.get("positions") == "sinusoidal"
    for pname, p in params.items():
        assert p.grad is not None and p.grad.abs().sum() > 0, pname


def test_position_dependence(tiny_lm):
    """Each encoding makes the model position-aware: a shifted start changes the logits."""
    ids = torch.randint(0, V, (1, 8))
    for name, options in CASES:
        model = tiny_lm(name, options, max_len=32)
        with torch.no_grad():
            a = model(ids)
            b = model(ids, pos=torch.arange(8) + 3)
        if name == "conv":          # position only through padding: shifts are invisible
            assert_close(a, b)
        else:
            assert (a - b).abs().max() > 1e-3, name


# ---------------------------------------------------------------------- multiplicative
def test_multiplicative_formulas():
    x, pos = torch.randn(2, 5, C), torch.arange(5) + 2
    pe = _pe("multiplicative")
    assert_close(pe.embed(x, pos), x * pe.table[pos])
    assert_close(pe.table.mean(), torch.tensor(1.0), atol=0.05, rtol=0)     # starts near 1
    sin = _pe("multiplicative", positions="sinusoidal", base=100.0)
    assert_close(sin.embed(x, pos), x * sinusoidal_at(pos, C, 100.0))
    with pytest.raises(ValueError, match=r"\[0, 32\)"):
        pe.embed(x, torch.arange(5) + 30)


@pytest.mark.parametrize("options,match", [
    ({"positions": "rotary"}, "positions"), ({"init_std": -0.1}, "init_std"),
    ({"base": 0.5}, "base")])
def test_multiplicative_options(options, match):
    with pytest.raises(ValueError, match=match):
        _pe("multiplicative", **options)


# ------------------------------------------------------------------------ hierarchical
def test_hierarchical_formula_and_table_reproduction():
    n, alpha = 5, 0.3
    table = torch.randn(n, C)
    u = hierarchical_positions(table, torch.arange(n * n), alpha)            # (n², C)
    assert_close(u[:n], table)                                # first block = trained table
    q = (table - alpha * table[0]) / (1 - alpha)
    for i, j in [(1, 0), (2, 3), (4, 4)]:
        assert_close(u[i * n + j], alpha * q[i] + (1 - alpha) * q[j])
    assert torch.cdist(u, u).add(torch.eye(n * n)).min() > 1e-3          # all n² distinct


def _learned_lm(max_len=6):
    torch.manual_seed(3)
    cfg = LMConfig(vocab_size=V, d_model=C, n_layers=1, n_heads=H, max_len=max_len, d_ff=16,
                   pe="learned", pe_options={"logn_base_len": 4})
    model = TransformerLM(cfg).eval()
    with torch.no_grad():
        model.pe.table.normal_(0, 0.5)                        # a "trained" table
    return model


def test_extend_learned_model_in_place():
    model = _learned_lm(max_len=6)
    ids = torch.randint(0, V, (2, 6))
    with torch.no_grad():
        before = model(ids)
    param = model.pe.table
    table = param.detach().clone()
    assert extend_learned_model(model, alpha=0.4) is model
    assert isinstance(model.pe, HierarchicalEncoding)
    assert model.pe.table is param                            # an optimizer keeps training it
    assert model.config.pe == "hierarchical"
    assert model.config.pe_options == {"logn_base_len": 4, "alpha": 0.4, "base_len": 6}
    assert_close(model.pe.table, table)
    long_ids = torch.randint(0, V, (1, 36))
    with torch.no_grad():
        assert_close(model(ids), before)                      # positions 0..n-1 unchanged
        out = model(long_ids)                                 # n² = 36 positions now work
        assert out.shape == (1, 36, V)
        with pytest.raises(ValueError, match="n_positions=36"):
            model(torch.randint(0, V, (1, 37)))
    # the new config rebuilds a model that loads the same state dict
    rebuilt = TransformerLM(model.config).eval()
    rebuilt.load_state_dict(model.state_dict())
    with torch.no_grad():
        assert_close(rebuilt(long_ids), out)


def test_extend_learned_model_rejects_other_encodings(tiny_lm):
    with pytest.raises(ValueError, match="'learned'"):
        extend_learned_model(tiny_lm("rope"))
    with pytest.raises(ValueError, match="alpha"):
        extend_learned_model(_learned_lm(), alpha=1.0)


@pytest.mark.parametrize("options,match", [
    ({"alpha": 0.0}, r"alpha must be a number in \(0.0, 1.0\)"),
    ({"alpha": 1.2}, "alpha"),
    ({"base_len": 4, "n_positions": 17}, r"n_positions must be in \[base_len, base_len²\]"),
    ({"base_len": 4, "n_positions": 3}, "n_positions"),
    ({"base_len": 0}, "base_len")])
def test_hierarchical_options(options, match):
    with pytest.raises(ValueError, match=match):
        _pe("hierarchical", **options)


# ------------------------------------------------------------- recurrent and floater
@pytest.mark.parametrize("name,options", [
    ("recurrent", {}), ("floater", {}), ("floater", {"substeps": 2, "method": "midpoint"}),
    ("floater", {"method": "dopri5"})], ids=str)
def test_trajectory_is_prefix_consistent(name, options):
    pe = _pe(name, **options)
    long, short = pe.trajectory(40), pe.trajectory(13)
    assert torch.equal(long[:13], short)
    assert (long[1:] - long[:-1]).norm(dim=-1).min() > 0      # consecutive vectors differ


def test_recurrent_follows_its_gru():
    pe = _pe("recurrent")
    traj = pe.trajectory(4)
    state = pe.p0[None]
    for k in range(4):
        assert_close(traj[k], (state * pe.scale)[0])
        state = pe.cell(torch.ones(1, 1), state)


def test_floater_solves_its_ode():
    """rk4 at one step per position agrees with a tight adaptive solution, and the
    trajectory's central difference matches the dynamics."""
    pe = _pe("floater", delta=0.2)
    with torch.no_grad():
        coarse = pe.trajectory(30)
        fine = _pe("floater", delta=0.2, method="dopri5", rtol=1e-7, atol=1e-9)
        fine.load_state_dict(pe.state_dict())
        assert_close(coarse, fine.trajectory(30), atol=1e-5, rtol=1e-4)
        k = torch.arange(1, 29)
        slope = (coarse[k + 1] - coarse[k - 1]) / 2               # d p / d tau
        h = torch.stack([pe.dynamics(kk.float(), coarse[kk]) for kk in k])
        assert_close(slope, h, atol=2e-4, rtol=2e-2)


def test_floater_integrates_in_fp32_for_low_precision_models():
    """Integer times past 256 are not representable in bf16; the ODE runs in fp32."""
    pe = _pe("floater")
    want = pe.trajectory(260)
    pe.to(torch.bfloat16)
    got = pe.trajectory(260)
    assert got.dtype == torch.float32
    assert torch.equal(got[:100], pe.trajectory(100))
    assert_close(got, want, atol=1e-2, rtol=5e-2)          # parameters rounded to bf16
    x = torch.zeros(1, 3, C, dtype=torch.bfloat16)
    assert pe.embed(x, torch.tensor([257, 258, 259])).dtype == torch.bfloat16


@pytest.mark.parametrize("name", ["recurrent", "floater"])
def test_trajectory_cache_is_never_stale(name):
    pe = _pe(name)
    pos, x = torch.arange(10), torch.zeros(1, 10, C)
    with torch.no_grad():
        first = pe.embed(x, pos)
        assert_close(pe.embed(torch.zeros(1, 12, C), torch.arange(12))[:, :10], first)
        assert pe._cache is not None
    opt = torch.optim.SGD(pe.parameters(), lr=0.5)
    pe.embed(x, pos).square().sum().backward()                        # training: recomputed
    opt.step()
    with torch.no_grad():
        after = pe.embed(x, pos)
    assert (after - first).abs().max() > 1e-4
    with torch.no_grad():
        assert_close(after, pe.trajectory(10)[None])


@pytest.mark.parametrize("options,match", [
    ({"method": "leapfrog"}, "method"), ({"delta": 0.0}, "delta"),
    ({"substeps": 3}, "power of two"), ({"method": "dopri5", "substeps": 2}, "substeps"),
    ({"rtol": 0.0}, "rtol"), ({"hidden_dim": 0}, "hidden_dim"),
    ({"init_scale": -1.0}, "init_scale")])
def test_floater_options(options, match):
    with pytest.raises(ValueError, match=match):
        _pe("floater", **options)


def test_recurrent_options():
    with pytest.raises(ValueError, match=r"init_scale must be a number in \(0.0, inf\)"):
        _pe("recurrent", init_scale=0.0)


# ---------------------------------------------------------------------- complex_order
def test_complex_order_offset_property():
    """Shifting a word by n positions multiplies its complex embedding by exp(i w n)."""
    pe = _pe("complex_order", vocab_size=V)
    with torch.no_grad():
        pe.frequency.normal_(0, 0.5)
    x, ids, pos = torch.randn(2, 6, C), torch.randint(0, V, (2, 6)), torch.arange(6)
    z = pe.complex_embedding(x, pos, ids)
    for n in (1, 7):
        shifted = pe.complex_embedding(x, pos + n, ids)
        turn = torch.polar(torch.ones(2, 6, C), pe.frequency[ids] * n)
        assert_close(shifted, z * turn)
    assert_close(z.abs(), x.abs())                            # the amplitude is position-free
    # the projection starts at [I, 0]: the real part alone
    angle = pe.frequency[ids] * pos[None, :, None] + pe.phase[ids]
    assert_close(pe.embed(x, pos, ids=ids), x * angle.cos())


def test_complex_order_in_a_model_and_errors():
    cfg = LMConfig(vocab_size=V, d_model=C, n_layers=1, n_heads=H, max_len=16, d_ff=16,
                   pe="complex_order", pe_options={"vocab_size": V})
    model = TransformerLM(cfg)
    assert model(torch.randint(0, V, (1, 5))).shape == (1, 5, V)
    with pytest.raises(ValueError, match="vocab_size"):
        _pe("complex_order")
    with pytest.raises(ValueError, match="vocab_size"):
        _pe("complex_order", vocab_size=0)
    with pytest.raises(ValueError, match="freq_base"):
        _pe("complex_order", vocab_size=V, freq_base=1.0)
    pe = _pe("complex_order", vocab_size=10)
    with pytest.raises(ValueError, match=r"\[0, 10\)"):
        pe.embed(torch.randn(1, 3, C), torch.arange(3), ids=torch.tensor([[1, 2, 10]]))
    with pytest.raises(ValueError, match="token ids"):
        pe.embed(torch.randn(1, 3, C), torch.arange(3))


# ------------------------------------------------------------------------------- conv
def test_conv_leaks_position_through_zero_padding():
    """A constant input is marked only where the kernel overlaps the zero padding."""
    x = torch.randn(C).expand(1, 10, C)
    causal = _pe("conv", kernel_size=3)
    out = causal.embed(x, torch.arange(10))[0]
    assert_close(out[2:], out[2].expand(8, C))               # interior: translation-equal
    assert (out[0] - out[2]).abs().max() > 1e-3 and (out[1] - out[2]).abs().max() > 1e-3
    centered = _pe("conv", kernel_size=5, padding="centered")
    out = centered.embed(x, torch.arange(10))[0]
    assert_close(out[2:8], out[2].expand(6, C))
    for edge in (0, 1, 8, 9):
        assert (out[edge] - out[4]).abs().max() > 1e-3


def test_conv_causal_ignores_the_future_and_decodes_in_steps():
    pe = _pe("conv", kernel_size=4, bias=True)
    with torch.no_grad():
        pe.bias.normal_()
    x = torch.randn(2, 9, C)
    full = pe.embed(x, torch.arange(9))
    changed = x.clone()
    changed[:, 6:] += 1.0
    assert_close(pe.embed(changed, torch.arange(9))[:, :6], full[:, :6])
    state: dict = {}
    steps = [pe.embed(x[:, :2], torch.arange(2), state=state)]
    steps += [pe.embed(x[:, t:t + 1], torch.tensor([t]), state=state) for t in range(2, 9)]
    assert_close(torch.cat(steps, dim=1), full)


@pytest.mark.parametrize("options,match", [
    ({"kernel_size": 1}, "kernel_size"), ({"kernel_size": 4, "padding": "centered"}, "odd"),
    ({"padding": "same"}, "padding"), ({"bias": 1}, "bias")])
def test_conv_options(options, match):
    with pytest.raises(ValueError, match=match):
        _pe("conv", **options)


def test_conv_centered_refuses_a_cache():
    pe = _pe("conv", padding="centered")
    with pytest.raises(ValueError, match="causal"):
        pe.embed(torch.randn(1, 3, C), torch.arange(3), state={})


def test_recurrent_init_keeps_positions_apart():
    """The GRU init keeps consecutive positions distinct for hundreds of steps (width 64)."""
    pe = build_encoding("recurrent", n_heads=1, head_dim=64)
    with torch.no_grad():
        traj = pe.trajectory(200) / pe.scale
    assert (traj[1:] - traj[:-1]).norm(dim=-1).min() > 1e-3
