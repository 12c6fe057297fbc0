"""Shared by the pair-kernel and pair-layout tests."""

from __future__ import annotations

import torch


def pair_leaves(batch: int, heads: int, length: int, seed: int):
    """q, k as the attention's views of (B, L, H, D) projections, and two head tables."""
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, length, heads, 5, generator=gen).transpose(1, 2).requires_grad_()
    k = torch.randn(batch, length, heads, 5, generator=gen).transpose(1, 2).requires_grad_()
    hq = torch.randn(heads, length, 5, generator=gen, requires_grad=True)
    hk = torch.randn(heads, length, 5, generator=gen, requires_grad=True)
    return q, k, hq, hk
