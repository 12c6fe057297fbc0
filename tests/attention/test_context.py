"""The attention context a model builds once per forward checks itself; the per-call
AttentionCall hands the hooks their HookContext."""

from __future__ import annotations

import pytest
import torch

from posenc.attention import AttentionCall, AttentionContext, Masks
from tests.helpers import raises_one_line as _raises

pytestmark = pytest.mark.usefixtures("single_thread")


def test_context_checks_positions_masks_flags_and_backend():
    pos = torch.arange(5)
    _raises(r"positions must be an integer tensor of positions, got dtype torch.float32",
            AttentionContext, pos.float(), causal=True)
    _raises(r"positions must have shape \(length,\) or \(batch, length\)", AttentionContext,
            torch.zeros(1, 2, 5, dtype=torch.long), causal=True)
    _raises(r"key_valid must be \(batch, 5\), one entry per position, got \(2, 4\)",
            AttentionContext, pos, causal=True, key_valid=torch.ones(2, 4, dtype=torch.bool))
    _raises(r"documents must be \(batch, 5\), one entry per position, got \(3, 5\)",
            AttentionContext, pos.expand(2, 5), causal=True,
            documents=torch.zeros(3, 5, dtype=torch.long))
    _raises(r"causal must be True or False, got 1", AttentionContext, pos, causal=1)
    _raises(r"consecutive must be True or False", AttentionContext, pos, causal=True,
            consecutive=None)
    _raises(r"unknown attention backend 'fast'; valid: auto, sdpa, flex, eager",
            AttentionContext, pos, causal=True, backend="fast")


def test_context_checks_the_memory_of_cross_attention():
    pos, memory = torch.arange(2), torch.randn(1, 3, 8)
    _raises(r"memory_pos and memory_valid need the memory", AttentionContext, pos,
            causal=True, memory_pos=torch.arange(3))
    _raises(r"memory must be \(batch, source length, d_model\), got \(3, 8\)",
            AttentionContext, pos, causal=True, memory=memory[0], memory_pos=torch.arange(3))
    _raises(r"memory_pos must have shape \(3,\) or \(1, 3\)", AttentionContext, pos,
            causal=True, memory=memory, memory_pos=torch.arange(4))
    _raises(r"memory_valid must be \(batch, 3\)", AttentionContext, pos, causal=True,
            memory=memory, memory_pos=torch.arange(3), memory_valid=torch.ones(1, 2).bool())
    ctx = AttentionContext(pos, causal=True, memory=memory, memory_pos=torch.arange(3),
                           memory_valid=torch.ones(1, 3, dtype=torch.bool))
    assert ctx.memory is memory


def test_hook_context_of_a_layer_and_of_a_call():
    pos = torch.arange(3, 7)
    ctx = AttentionContext(pos, causal=True, consecutive=True)
    keys = torch.arange(7)
    at = ctx.hook_context(keys, False, "eager")     # after a cache: all keys, run broken
    assert at.q_pos is pos and at.k_pos is keys
    assert (at.causal, at.consecutive, at.backend) == (True, False, "eager")
    masks = Masks(key_valid=torch.ones(1, 7, dtype=torch.bool))
    call = AttentionCall.for_positions(pos, keys, causal=True, backend="sdpa", masks=masks)
    assert call.at.backend is None and call.backend == "sdpa" and call.causal
    assert call.active_masks() is masks
    assert AttentionCall(call.at).active_masks() is None
    routed = call.routed("fused")
    assert routed.at.backend == "fused" and routed.masks is masks and routed.backend == "sdpa"
    _raises(r"q_pos must be an integer tensor", AttentionCall.for_positions, pos.float(), keys)
