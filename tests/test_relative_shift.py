"""Pair layouts of per-distance tables, and ``score_bias(causal=True)`` of every encoding."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from posenc.encodings import build_encoding, list_encodings
from posenc.encodings.relative_shift import pair_layout

from conftest import context_options, sharpen

pytestmark = pytest.mark.usefixtures("single_thread")


def _term(distances: torch.Tensor) -> torch.Tensor:
    """A per-distance function with a different value at every distance: (3, 1, N)."""
    return torch.sin(distances.float()[None, None] * 0.37 + torch.arange(3.0)[:, None, None])


@pytest.mark.parametrize("q_pos,k_pos,causal,kind", [
    (torch.arange(7), torch.arange(7), True, "causal"),
    (torch.arange(5, 12), torch.arange(5, 12), True, "causal"),
    (torch.arange(7), torch.arange(7), False, "window"),
    (torch.arange(3, 7), torch.arange(7), True, "window"),
    (torch.arange(2, 6), torch.arange(5, 9), False, "window"),
    (torch.tensor([1, 4, 6]), torch.arange(7), True, "gather"),
    (torch.tensor([1, 4, 6]), torch.tensor([0, 2, 3, 6, 7]), False, "gather"),
], ids=lambda x: x if isinstance(x, str) else None)
def test_layouts_read_each_pair_at_its_distance(q_pos, k_pos, causal, kind):
    """query_rows / key_rows of distance tables equal the term at q_pos_i - k_pos_j, values
    and gradients, at every pair the attention can see."""
    layout = pair_layout(q_pos, k_pos, causal)
    assert layout.kind == kind
    lq, lk = len(q_pos), len(k_pos)
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(2, 3, lq, 1, generator=gen, requires_grad=True)    # per-query weight
    b = torch.randn(2, 3, lk, 1, generator=gen, requires_grad=True)    # per-key weight
    got = (layout.query_rows(a * _term(layout.query_distances))
           + layout.key_rows(b * _term(layout.key_distances)))
    dist = q_pos[:, None] - k_pos[None, :]
    exact = _term(dist.flatten()).view(3, lq, lk)
    want = a * exact + b.transpose(-2, -1) * exact
    seen = dist >= 0 if causal else torch.ones_like(dist, dtype=torch.bool)
    assert_close(got[..., seen], want[..., seen])
    grad = torch.randn(2, 3, lq, lk, generator=gen) * seen               # hidden: no gradient
    for g, w in zip(torch.autograd.grad(got, (a, b), grad), torch.autograd.grad(want, (a, b),
                                                                             grad)):
        assert_close(g, w, atol=1e-6, rtol=1e-5)


BIASED = [n for n in list_encodings()
          if build_encoding(n, n_heads=2, head_dim=8, max_len=64,
                            **context_options(n)).has_bias]


@pytest.mark.parametrize("name", BIASED)
def test_causal_bias_equals_the_full_one_where_visible(name):
    """``causal=True`` may skip hidden pairs; at visible pairs its values and gradients (into
    q, k and every parameter) are those of the full bias."""
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
    for causal in (False, True):
        bias = pe.score_bias(q, k, pos, pos, causal).expand(2, 2, 9, 9)
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
