"""Routing is a pure function of host values: driven here with device strings, no GPU needed.

The rules under test: posenc's fused CPU attention never runs on another device (nor under
torch.compile, in another dtype, with dropout or without gradients); CUDA trains biased
encodings through SDPA or FlexAttention; the CPU's FlexAttention has no backward; a few
queries (decoding) never go to FlexAttention; value-term encodings run eager or fused only.
"""

from __future__ import annotations

import itertools

import pytest
import torch

from posenc import build_encoding, list_encodings
from posenc.attention import BACKENDS, IMPLEMENTATIONS, choose_backend, route
from posenc.attention.routing import FLEX_MIN_LEN, FLEX_MIN_QUERIES, RoutingFacts

BIAS = ("sdpa", "flex", "eager")            # a bias with a score_mod (alibi, t5, kerple, ...)
BIAS_NO_MOD = ("sdpa", "eager")              # a bias without one
VALUE_TERM = ("eager",)                      # shaw: weights needed
PLAIN = ("sdpa", "flex", "eager")            # rope, nope, ... (has_bias False)

DEVICES = ("cpu", "cuda", "mps", "xpu")
DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _all_calls():
    """Every combination of the host values routing reads."""
    for caps, has_bias in ((BIAS, True), (BIAS_NO_MOD, True), (VALUE_TERM, True),
                           (PLAIN, False)):
        for device, dtype, grad, dropout, compiling, lengths in itertools.product(
                DEVICES, DTYPES, (True, False), (0.0, 0.1), (True, False),
                ((64, 64), (1, 4096), (4096, 4096), (FLEX_MIN_QUERIES, FLEX_MIN_LEN))):
            yield caps, has_bias, dict(device_type=device, dtype=dtype, grad=grad,
                                       dropout=dropout, compiling=compiling,
                                       q_len=lengths[0], k_len=lengths[1])


def test_fused_runs_only_for_cpu_fp32_training_without_dropout_outside_compile():
    for caps, has_bias, call in _all_calls():
        chosen = choose_backend(caps, has_bias, RoutingFacts(**call))
        assert chosen in IMPLEMENTATIONS
        if chosen == "fused":
            assert call["device_type"] == "cpu" and call["dtype"] == torch.float32
            assert call["grad"] and call["dropout"] == 0.0 and not call["compiling"]
            assert has_bias


def test_cuda_trains_biased_encodings_on_sdpa_or_flex():
    for caps in (BIAS, BIAS_NO_MOD):
        for q_len, k_len in ((256, 256), (4096, 4096)):
            chosen = choose_backend(caps, True,
                                    RoutingFacts(device_type="cuda", dtype=torch.float32,
                                                 grad=True, q_len=q_len, k_len=k_len))
            assert chosen in ("sdpa", "flex")
    assert choose_backend(BIAS, True,
                          RoutingFacts(device_type="cuda", grad=True, q_len=4096,
                                       k_len=4096)) == "flex"
    assert choose_backend(BIAS, True,
                          RoutingFacts(device_type="cpu", grad=True, q_len=4096,
                                       k_len=4096)) == "fused"
    assert choose_backend(BIAS_NO_MOD, True,
                          RoutingFacts(device_type="cuda", grad=True, q_len=4096,
                                       k_len=4096)) == "sdpa"


def test_long_evaluation_uses_flex_and_decoding_does_not():
    for device in ("cpu", "cuda"):
        long = dict(device_type=device, grad=False, k_len=FLEX_MIN_LEN)
        assert choose_backend(BIAS, True, RoutingFacts(q_len=FLEX_MIN_LEN, **long)) == "flex"
        assert choose_backend(BIAS, True,
                              RoutingFacts(q_len=FLEX_MIN_QUERIES - 1, **long)) == "sdpa"
        assert choose_backend(BIAS, True, RoutingFacts(q_len=1, **long)) == "sdpa"
        assert choose_backend(BIAS, True,
                              RoutingFacts(q_len=FLEX_MIN_LEN, k_len=FLEX_MIN_LEN - 1,
                                           device_type=device, grad=False)) == "sdpa"
        assert choose_backend(PLAIN, False, RoutingFacts(q_len=FLEX_MIN_LEN, **long)) == "sdpa"
        assert choose_backend(BIAS_NO_MOD, True,
                              RoutingFacts(q_len=FLEX_MIN_LEN, **long)) == "sdpa"


def test_cpu_flex_is_forward_only_and_cuda_flex_trains():
    with pytest.raises(ValueError, match="forward-only on cpu"):
        choose_backend(BIAS, True, RoutingFacts(requested="flex", device_type="cpu", grad=True))
    assert choose_backend(BIAS, True,
                          RoutingFacts(requested="flex", device_type="cpu", grad=False)) == "flex"
    assert choose_backend(BIAS, True,
                          RoutingFacts(requested="flex", device_type="cuda", grad=True)) == "flex"
    # auto never picks a backend that would fail
    for caps, has_bias, call in _all_calls():
        if choose_backend(caps, has_bias, RoutingFacts(**call)) == "flex" and call["grad"]:
            assert call["device_type"] == "cuda"


def test_value_terms_run_eager_or_fused_and_weights_need_eager():
    for caps, has_bias, call in _all_calls():
        if caps == VALUE_TERM:
            assert choose_backend(caps, has_bias, RoutingFacts(**call)) in ("eager", "fused")
        assert choose_backend(caps, has_bias, RoutingFacts(need_weights=True, **call)) == "eager"
    assert choose_backend(VALUE_TERM, True, RoutingFacts(device_type="cuda", grad=True)) == "eager"
    assert choose_backend(VALUE_TERM, True, RoutingFacts(device_type="cpu", grad=True)) == "fused"


def test_requests_are_checked_and_kept():
    with pytest.raises(ValueError, match="unknown attention backend 'fast'.*auto, sdpa"):
        choose_backend(BIAS, True, RoutingFacts(requested="fast"))
    with pytest.raises(ValueError, match="cannot run on backend 'sdpa'; it supports: eager"):
        choose_backend(VALUE_TERM, True, RoutingFacts(requested="sdpa"))
    assert choose_backend(BIAS, True,
                          RoutingFacts(requested="eager", device_type="cpu", grad=True)) == "eager"
    assert choose_backend(BIAS, True,
                          RoutingFacts(requested="sdpa", device_type="cpu", grad=True)) == "fused"
    assert choose_backend(BIAS, True,
                          RoutingFacts(requested="sdpa", device_type="cuda", grad=True)) == "sdpa"
    assert choose_backend(PLAIN, False,
                          RoutingFacts(requested="sdpa", device_type="cpu", grad=True)) == "sdpa"
    assert set(BACKENDS) == {"auto", "sdpa", "flex", "eager"}


@pytest.mark.parametrize("name", list_encodings())
def test_route_reads_only_tensor_metadata(name):
    """``route`` on meta tensors (no data to read) agrees with the pure function."""
    options = {"vocab_size": 32} if name == "complex_order" else {}
    pe = build_encoding(name, n_heads=2, head_dim=8, max_len=64, **options)
    q = torch.empty(2, 2, 16, 8, device="meta", requires_grad=True)
    k = v = torch.empty(2, 2, 16, 8, device="meta")
    expected = choose_backend(pe.backends(), pe.has_bias,
                              RoutingFacts(device_type="meta", grad=True, q_len=16, k_len=16))
    assert route(pe, q, k, v) == expected
    with torch.no_grad():
        long = RoutingFacts(device_type="meta", grad=False, q_len=16, k_len=4096)
        want = choose_backend(pe.backends(), pe.has_bias, long)
        assert route(pe, q, k, v, k_len=4096) == want
