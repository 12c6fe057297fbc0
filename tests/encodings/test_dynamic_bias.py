"""The dynamic position bias (Wang et al., 2021; log-spaced: Liu et al., 2022): x-transformers'
``DynamicPositionBias`` as the oracle (copied weights), translation invariance, the clamp at
``max_distance``, and option errors."""

from __future__ import annotations

import math

import pytest
import torch
from torch.testing import assert_close

from posenc.attention import attend
from posenc.attention.context import AttentionCall
from posenc.encodings import build_encoding
from posenc.encodings.context import HookContext
from tests.encodings.helpers import assert_backend_grads_agree
from tests.helpers import raises_one_line

pytestmark = pytest.mark.usefixtures("single_thread")

H, D, W = 4, 8, 16


def _pe(**options):
    return build_encoding("dynamic_bias", n_heads=H, head_dim=D, max_len=64,
                          **{"mlp_width": W, **options})


def _x_transformers(pe, depth, log_distance):
    """x-transformers' module with ``pe``'s weights (its Linear layers in order)."""
    xt = pytest.importorskip("x_transformers.x_transformers")
    ref = xt.DynamicPositionBias(W, heads=H, depth=depth, log_distance=log_distance)
    ours = [m for m in pe.mlp.modules() if isinstance(m, torch.nn.Linear)]
    theirs = [m for m in ref.mlp.modules() if isinstance(m, torch.nn.Linear)]
    assert len(ours) == len(theirs) == depth + 1
    with torch.no_grad():
        for a, b in zip(ours, theirs):
            b.weight.copy_(a.weight)
            b.bias.copy_(a.bias)
    return ref


@pytest.mark.parametrize("depth,log_distance", [(2, False), (2, True), (3, True), (1, False)])
def test_bias_equals_x_transformers_dynamic_position_bias(depth, log_distance):
    """Queries the last 7 of 19 keys, every pair (the bias is bidirectional as it is)."""
    pe = _pe(depth=depth, log_distance=log_distance)
    ref = _x_transformers(pe, depth, log_distance)
    at = HookContext.for_positions(torch.arange(12, 19), torch.arange(19), causal=False)
    assert_close(pe.score_bias(None, None, at)[0], ref(7, 19), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("backend", ["sdpa", "eager", "flex"])
@torch.no_grad()
def test_attention_output_equals_x_transformers(backend):
    pe = _pe(log_distance=True)
    ref = _x_transformers(pe, 2, True)
    gen = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, H, 16, D, generator=gen) for _ in range(3))
    pos = torch.arange(16)
    out = attend(q, k, v, pe, AttentionCall.for_positions(pos, pos, causal=True,
                                                         backend=backend))[0]
    logits = q @ k.transpose(-1, -2) / math.sqrt(D) + ref(16, 16)
    logits = logits.masked_fill(torch.ones(16, 16, dtype=torch.bool).triu(1), float("-inf"))
    assert_close(out, logits.softmax(-1) @ v, atol=1e-5, rtol=1e-5)


def test_bias_depends_on_the_distance_only():
    pe = _pe()
    q_pos, k_pos = torch.arange(5, 9), torch.arange(9)
    bias = pe.score_bias(None, None, HookContext.for_positions(q_pos, k_pos))
    shifted = pe.score_bias(None, None, HookContext.for_positions(q_pos + 37, k_pos + 37))
    assert_close(bias, shifted)
    assert pe.translation_invariant and not pe.per_layer


def test_distances_past_max_distance_get_the_bias_of_the_longest():
    pe = _pe(max_distance=6, log_distance=True)
    table = pe.distance_bias(torch.arange(-12, 13))                   # (H, 25)
    assert_close(table[:, :6], table[:, 6:7].expand(H, 6))            # i - j >= 6
    assert_close(table[:, -6:], table[:, -7:-6].expand(H, 6))
    assert not torch.allclose(table[:, 6], table[:, 7])
    assert_close(pe.mlp_input(torch.tensor([-3, 0, 2])),
                 torch.tensor([math.log(4.0), 0.0, -math.log(3.0)]))
    assert _pe().max_distance == 63                                   # max_len - 1
    assert build_encoding("dynamic_bias", n_heads=H, head_dim=D).max_distance == 1024


def test_bad_options_are_one_line_errors():
    raises_one_line(r"mlp_width must be an integer >= 1, got 0", _pe, mlp_width=0)
    raises_one_line(r"depth must be an integer >= 1, got 0", _pe, depth=0)
    raises_one_line(r"log_distance must be True or False, got 'yes'", _pe, log_distance="yes")
    raises_one_line(r"max_distance must be an integer >= 1, got 2.5", _pe, max_distance=2.5)


def test_training_gradients_agree_across_backends():
    """The input, the projections and the encoding's parameters get the same gradients
    through the fused CPU attention (backend "sdpa" in training) as through eager."""
    assert_backend_grads_agree(_pe())
