"""The forms derived from a RelativeTerm declaration (gather, strided views, fused causal
kernels, FlexAttention score_mod) against a per-pair reference, on toy declarations with
random tables: bounded (a bucket map), clipped, unbounded, query and key side."""

from __future__ import annotations

import pytest
import torch

from posenc.encodings.context import HookContext
from posenc.encodings.relative_term import (
    RelativeTerm,
    fused_relative_bias,
    gathered_bias,
    relative_bias,
    relative_score_mod,
    relative_value_sum,
    strided_bias,
)
from posenc.errors import UserError
from posenc.kernels import build as native_build
from posenc.kernels.layouts.causal_pairs import CausalPairBias
from posenc.kernels.layouts.clipped_pairs import ClippedPairBias
from posenc.kernels.pairs import native_pair_status
from tests.kernels.native import require_native

B, H, D, ROWS, CLIP = 2, 3, 4, 12, 3
GAPPED = torch.tensor([[0, 1, 3, 4, 8], [2, 3, 4, 9, 10]])        # (B, L) with gaps


def bucket_rows(delta):
    """A toy many-to-one distance map onto ROWS rows (floor halves, clamped)."""
    return (torch.div(delta, 2, rounding_mode="floor") + ROWS // 2).clamp(0, ROWS - 1)


def leaves(lq, lk, seed=0):
    """Leaf q (B, H, Lq, D), k (B, H, Lk, D), head tables (H, ROWS, D), shared (2K+1, D) and
    per-head frequencies (H, D) for an unbounded sinusoidal table."""
    g = torch.Generator().manual_seed(seed)
    shapes = ((B, H, lq, D), (B, H, lk, D), (H, ROWS, D), (H, ROWS, D), (2 * CLIP + 1, D),
              (H, D))
    return [torch.randn(s, generator=g).requires_grad_() for s in shapes]


def declare(kind, q, k, query_heads, key_heads, shared, freq):
    """Term lists by name: "pair" (query + key bounded), "query", "key", "clipped",
    "unbounded", "mixed" (bounded key + unbounded query)."""
    def rows_of(table):
        return lambda rows: table if rows is None else table[:, rows]

    def sinusoid(distances):                                         # (H, N, D)
        return torch.sin(distances.to(freq.dtype)[None, :, None] * freq[:, None] * 0.3)

    query = RelativeTerm.bounded("query", q, rows_of(query_heads), bucket_rows, ROWS)
    key = RelativeTerm.bounded("key", k, rows_of(key_heads), bucket_rows, ROWS)
    clipped = RelativeTerm.clipped("query", q, lambda r: shared if r is None else shared[r],
                                   CLIP, scale=0.7)
    unbounded = RelativeTerm.unbounded("query", q, sinusoid)
    return {"pair": [query, key], "query": [query], "key": [key], "clipped": [clipped],
            "unbounded": [unbounded], "mixed": [unbounded, key]}[kind]


def reference(terms, q_pos, k_pos):
    """Each pair's sum of x_side . heads[row(q_pos_i - k_pos_j)], pair by pair:
    (B, H, Lq, Lk)."""
    q_pos = q_pos.expand(B, -1) if q_pos.dim() == 1 else q_pos
    k_pos = k_pos.expand(B, -1) if k_pos.dim() == 1 else k_pos
    lq, lk = q_pos.shape[1], k_pos.shape[1]
    out = torch.zeros(B, H, lq, lk)
    for term in terms:
        for b in range(B):
            for i in range(lq):
                for j in range(lk):
                    delta = q_pos[b, i] - k_pos[b, j]
                    row = delta if term.row_of is None else term.row_of(delta)
                    heads = term.heads(row.reshape(1))                # (H, 1, D) or (1, D)
                    heads = heads[:, 0] if heads.dim() == 3 else heads.expand(H, D)
                    x = term.x[b, :, i if term.side == "query" else j]  # (H, D)
                    value = (x * heads).sum(-1) * (term.scale or 1.0)
                    out[b, :, i, j] = out[b, :, i, j] + value
    return out


def call_score_mod(score_mod, lq, lk):
    """The score_mod on every (b, h, i, j) at once, from zero scores: (B, H, Lq, Lk)."""
    b, h, i, j = (torch.arange(n).view([-1 if d == axis else 1 for d in range(4)])
                  for axis, n in enumerate((B, H, lq, lk)))
    return score_mod(torch.zeros(B, H, lq, lk), b, h, i, j)


def visible(bias, causal):
    """The bias at the pairs attention reads (j <= i when causal), zero elsewhere."""
    if not causal:
        return bias
    n = bias.shape[-1]
    return bias * torch.ones(n, n).tril()


KINDS = ("pair", "query", "key", "clipped", "unbounded", "mixed")


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("per_sequence", [False, True])
def test_gather_and_score_mod_equal_the_reference(kind, per_sequence):
    """Any positions, shared (Lq,) or per sequence (B, Lq): gathers and the score_mod."""
    q_pos = GAPPED[:, 2:] if per_sequence else torch.tensor([7, 3, 12])
    k_pos = GAPPED if per_sequence else torch.tensor([0, 2, 5, 9, 15])
    terms = declare(kind, *leaves(q_pos.shape[-1], k_pos.shape[-1]))
    want = reference(terms, q_pos, k_pos)
    at = HookContext.for_positions(q_pos, k_pos)
    torch.testing.assert_close(gathered_bias(terms, q_pos, k_pos), want)
    torch.testing.assert_close(relative_bias(terms, at), want)
    got = call_score_mod(relative_score_mod(terms, q_pos, k_pos), *want.shape[-2:])
    torch.testing.assert_close(got, want)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("first", [0, 5])
def test_strided_forms_equal_the_gathers(kind, causal, first):
    """Consecutive positions: the strided reads ("window", and "causal" over a square block)
    equal the gathers (at the visible pairs when causal), values and gradients."""
    length = 5                               # 5 causal distances fit the 12 rows; 9 do too
    pos = torch.arange(first, first + length)
    q_pos, k_pos = (pos, pos) if causal else (pos[2:], pos)
    inputs = leaves(q_pos.shape[-1], k_pos.shape[-1], seed=1)
    terms = declare(kind, *inputs)
    at = HookContext.for_positions(q_pos, k_pos, causal=causal, consecutive=True)
    assert at.layout_kind() == ("causal" if causal else "window")
    want = visible(gathered_bias(terms, q_pos, k_pos), causal)
    torch.testing.assert_close(want, visible(reference(terms, q_pos, k_pos), causal))
    for got in (strided_bias(terms, at.pair_layout()), relative_bias(terms, at)):
        got = visible(got, causal)
        torch.testing.assert_close(got, want)
        weight = torch.randn(want.shape, generator=torch.Generator().manual_seed(4))
        used = inputs
        grads_got = torch.autograd.grad((got * weight).sum(), used, allow_unused=True)
        grads_want = torch.autograd.grad((want * weight).sum(), used, allow_unused=True,
                                         retain_graph=True)
        for a, b in zip(grads_got, grads_want):
            assert (a is None) == (b is None)
            if a is not None:
                torch.testing.assert_close(a, b)


def test_layout_wider_than_a_bounded_table_falls_back_to_gathers():
    """15 consecutive causal distances exceed the 12 rows: still exact (the gathers)."""
    pos = torch.arange(15)
    terms = declare("pair", *leaves(15, 15, seed=2))
    at = HookContext.for_positions(pos, pos, causal=True, consecutive=True)
    want = visible(reference(terms, pos, pos), True)
    torch.testing.assert_close(visible(relative_bias(terms, at), True), want)


def test_clipped_term_over_a_causal_block_uses_the_clipped_pairs():
    """One clipped query-side term: ClippedPairBias, written with -inf at hidden pairs."""
    pos = torch.arange(9)
    terms = declare("clipped", *leaves(9, 9, seed=3))
    at = HookContext.for_positions(pos, pos, causal=True, consecutive=True)
    fused = fused_relative_bias(terms, at)
    assert isinstance(fused, ClippedPairBias)
    out = torch.empty(fused.shape)
    with torch.no_grad():                     # as fused attention writes its logits
        fused.write(out, 0)
    want = reference(terms, pos, pos)
    hidden = torch.ones(9, 9).triu(1).bool()
    torch.testing.assert_close(out.masked_fill(hidden, 0.0), visible(want, True))
    assert out[..., hidden].eq(float("-inf")).all()


def test_no_fused_form_off_a_causal_block_or_without_a_kernel():
    pos = torch.arange(6)
    terms = declare("unbounded", *leaves(6, 6))
    assert fused_relative_bias(terms, HookContext.for_positions(pos, pos, causal=True,
                                                                consecutive=True)) is None
    pair = declare("pair", *leaves(4, 6))
    at = HookContext.for_positions(pos[2:], pos, causal=False, consecutive=True)
    assert fused_relative_bias(pair, at) is None


def test_query_and_key_terms_over_a_causal_block_use_the_pair_kernels(monkeypatch):
    """A query-side plus a key-side bounded term: the row-group pair kernels' bias, values
    and gradients equal to the gathers at visible pairs."""
    monkeypatch.delenv("POSENC_NATIVE_KERNELS", raising=False)
    openmp, why = native_build.openmp_decision()
    if not openmp:
        pytest.skip(f"the pair kernels are not used here: {why}")
    require_native(native_pair_status())
    pos = torch.arange(10)
    inputs = leaves(10, 10, seed=5)
    terms = declare("pair", *inputs)
    at = HookContext.for_positions(pos, pos, causal=True, consecutive=True)
    fused = fused_relative_bias(terms, at)
    assert isinstance(fused, CausalPairBias)
    got, want = visible(fused.materialize(), True), visible(gathered_bias(terms, pos, pos), True)
    torch.testing.assert_close(got, want)
    weight = torch.randn(want.shape, generator=torch.Generator().manual_seed(6)).tril()
    used = inputs[:4]
    for a, b in zip(torch.autograd.grad((got * weight).sum(), used),
                    torch.autograd.grad((want * weight).sum(), used)):
        torch.testing.assert_close(a, b)
    cache = {}                                # rows kept per block length, same bias
    cached = [RelativeTerm.bounded(t.side, t.x, t.heads, t.row_of, t.n_rows, row_cache=cache)
              for t in terms]
    for _ in range(2):
        torch.testing.assert_close(fused_relative_bias(cached, at).materialize(),
                                   fused.materialize())
    assert sorted(key[:2] for key in cache) == [("key", 10), ("query", 10)]


@pytest.mark.parametrize("kind", ["bounded", "clipped"])
@pytest.mark.parametrize("layout", ["causal", "gather", "per_sequence"])
def test_value_sum_is_the_adjoint_of_the_pair_read(kind, layout):
    """sum_j w_ij heads[row_ij] equals the weights times a per-pair read of the heads
    (causal blocks of a clipped term: the clipped pairs' collect pass; else scatter-adds)."""
    q_pos, k_pos = {"causal": (torch.arange(8), torch.arange(8)),
                    "gather": (torch.tensor([7, 3, 12]), torch.tensor([0, 2, 5, 9, 15])),
                    "per_sequence": (GAPPED[:, 2:], GAPPED)}[layout]
    causal = layout == "causal"
    at = HookContext.for_positions(q_pos, k_pos, causal=causal, consecutive=causal)
    _, _, values, _, shared, _ = leaves(1, 1, seed=7)
    term = (RelativeTerm.bounded("query", None, lambda r: values if r is None else values[:, r],
                                 bucket_rows, ROWS) if kind == "bounded" else
            RelativeTerm.clipped("query", None, lambda r: shared if r is None else shared[r],
                                 CLIP))
    lq, lk = q_pos.shape[-1], k_pos.shape[-1]
    g = torch.Generator().manual_seed(8)
    weights = visible(torch.rand(B, H, lq, lk, generator=g), causal).requires_grad_()
    rows = term.row_of(q_pos[..., :, None] - k_pos[..., None, :])     # ([B,] Lq, Lk)
    heads = term.heads(rows.flatten())                                 # (H, N, D) or (N, D)
    per_pair = heads.unflatten(-2, rows.shape)                        # (H|.., [B,] Lq, Lk, D)
    if per_pair.dim() == 5:                                            # per head, per sequence
        per_pair = per_pair.transpose(0, 1)                            # (B, H, Lq, Lk, D)
    elif kind == "bounded":
        per_pair = per_pair[None]                                      # (1, H, Lq, Lk, D)
    elif rows.dim() == 3:                                              # shared by the heads
        per_pair = per_pair[:, None]                                   # (B, 1, Lq, Lk, D)
    want = (weights[..., None] * per_pair).sum(-2)                     # (B, H, Lq, D)
    got = relative_value_sum(term, weights, at)
    torch.testing.assert_close(got, want)
    if causal:                                                         # gradients: hidden 0
        grad_got, = torch.autograd.grad(got.sum(), weights)
        grad_want, = torch.autograd.grad(want.sum(), weights)
        torch.testing.assert_close(visible(grad_got, True), visible(grad_want, True))


def test_declaration_checks_its_fields():
    q = torch.zeros(1, 1, 2, 2)
    with pytest.raises(UserError, match="side must be"):
        RelativeTerm.unbounded("value", q, lambda rows: rows)
    with pytest.raises(UserError, match="row_of and n_rows"):
        RelativeTerm("query", q, lambda rows: rows, row_of=bucket_rows)
