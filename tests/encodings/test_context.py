"""HookContext: what a hook is told about one attention call; ``for_positions`` checks it."""

from __future__ import annotations

import pytest
import torch

from posenc import HookContext, build_encoding
from tests.helpers import raises_one_line as _raises

pytestmark = pytest.mark.usefixtures("single_thread")


def test_for_positions_checks_its_arguments():
    pos = torch.arange(4)
    at = HookContext.for_positions(pos)
    assert at.k_pos is pos and not at.causal and not at.consecutive and at.backend is None
    _raises(r"q_pos must be an integer tensor of positions, got dtype torch.float32",
            HookContext.for_positions, pos.float())
    _raises(r"k_pos must be an integer tensor of positions, got list",
            HookContext.for_positions, pos, [0, 1])
    _raises(r"k_pos must have shape \(length,\) or \(batch, length\)",
            HookContext.for_positions, pos, torch.zeros(1, 1, 4, dtype=torch.long))
    _raises(r"causal must be True or False, got 'yes'", HookContext.for_positions, pos,
            causal="yes")
    _raises(r"backend must be None or one of sdpa, fused, flex, eager, got 'auto'",
            HookContext.for_positions, pos, backend="auto")
    assert HookContext.for_positions(pos, causal=True).with_backend("flex").backend == "flex"


def test_hooks_compare_q_and_k_with_the_context():
    pe = build_encoding("alibi", n_heads=2, head_dim=8)
    q = torch.randn(1, 2, 3, 8)
    at = HookContext.for_positions(torch.arange(3), causal=True)
    assert pe.score_bias(q, q, at).shape == (1, 2, 3, 3)
    _raises(r"q_pos must have shape \(4,\) or \(1, 4\)", pe.score_bias,
            torch.randn(1, 2, 4, 8), q, at)


def test_key_terms_are_checked_and_kept_by_with_backend():
    pos = torch.arange(4)
    terms = torch.randn(2, 3, 4, 1)
    at = HookContext.for_positions(pos, key_terms=terms).with_backend("eager")
    assert at.key_terms is terms and at.backend == "eager"
    assert at.with_key_terms(None).key_terms is None and at.key_terms is terms
    _raises(r"key_terms must be None or a float tensor \(batch, heads, 4, terms\), one row "
            r"per key, got shape \(2, 3, 5, 1\)", HookContext.for_positions, pos,
            key_terms=torch.randn(2, 3, 5, 1))
    _raises(r"key_terms must be None .* got list", HookContext.for_positions, pos,
            key_terms=[1.0])
