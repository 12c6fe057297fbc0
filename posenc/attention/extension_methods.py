"""Attention under a region method (:mod:`posenc.methods.regions`): each (query, key) pair
scored at the positions its region assigns.

:func:`region_attention` rotates the raw (unrotated) q and k once per region, takes the scores
of each pair from its region and applies one softmax (the explicit-scores reference, also used
for pictures); :func:`blockwise_region_attention` runs a causal prefill in blocks of queries.
A key cache for these methods therefore keeps raw keys. :class:`RotaryTable` rotates by
integer or fractional positions with a model's RoPE frequencies.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor

from ..methods.regions import Region
from . import region_flash
from .region_flash import Rotate, reads_spans  # noqa: F401  (re-exported)


class RotaryTable:
    """rotate(x, pos) for RoPE with ``inv_freq`` (R/2,) in ``layout`` ("half" or
    "interleaved", as :func:`posenc.kernels.rotary.apply_rotary`): on a CPU integer
    positions read cos/sin from a table grown on demand (no transcendental functions per
    step); fractional ones, and any on an accelerator (where growing the table would read the
    largest position back, :func:`reads_spans`), compute them, to the same values."""

    def __init__(self, inv_freq: Tensor, layout: str = "half",
                 turns: dict[float, tuple[Tensor, Tensor]] | None = None) -> None:
        self.inv_freq, self.layout = inv_freq, layout
        self.tables: dict[float, tuple[Tensor, Tensor]] = {}      # scale -> cos, sin
        #: scale -> :func:`~posenc.kernels.rotary.frequency_turns` of the scaled inv_freq,
        #: made once (off CUDA it is computed on the CPU); ``turns``: those already known
        self.turns: dict[float, tuple[Tensor, Tensor]] = dict(turns or {})

    def __call__(self, x: Tensor, pos: Tensor, scale: float = 1.0) -> Tensor:
        from ..kernels.rotary import apply_rotary, frequency_turns, rotary_angles
        inv_freq = self.inv_freq if scale == 1.0 else self.inv_freq * scale
        if pos.is_floating_point():
            angles = rotary_angles(pos, inv_freq)
            return apply_rotary(x, angles.cos(), angles.sin(), self.layout)
        if not reads_spans(pos.device):
            turns = self.turns.get(scale)
            if turns is None:
                turns = self.turns[scale] = frequency_turns(inv_freq)
            angles = rotary_angles(pos, inv_freq, turns)
            return apply_rotary(x, angles.cos(), angles.sin(), self.layout)
        cos, sin = self.tables.get(scale, (inv_freq[:0], inv_freq[:0]))
        need = int(pos.max()) + 1 if pos.numel() else 0
        if need > cos.shape[0]:
            size = max(need, 2 * cos.shape[0], 64)
            angles = rotary_angles(torch.arange(size, device=pos.device), inv_freq)
            cos, sin = self.tables[scale] = angles.cos(), angles.sin()
        return apply_rotary(x, cos.index_select(0, pos), sin.index_select(0, pos), self.layout)


def region_attention(q: Tensor, k: Tensor, v: Tensor, regions: list[Region], rotate: Rotate,
                     scale: float, rotated_keys: dict[str, Tensor] | None = None) -> Tensor:
    """softmax over keys of the region-selected scores, times v.

    q (B, H, Tq, D), k and v (B, Hkv, Tk, D) raw (unrotated), H a multiple of Hkv (grouped
    query attention, query head h reads key head h // (H / Hkv)) -> (B, H, Tq, D).
    Pairs in no region are masked; each region's scores are computed only over the span of
    keys it covers (disjoint spans when decoding, so the work stays one pass over the keys);
    regions sharing one key map (Dual Chunk's) rotate the keys once. ``rotated_keys``: keys
    already rotated by each region's map, by region name, (B, Hkv, >= Tk, D). Spans are
    read from the masks on a CPU only (:func:`reads_spans`); elsewhere each region scores
    every key, masked, to the same result.
    """
    batch, heads, tq, dim = q.shape
    kv_heads, tk = k.shape[1], k.shape[2]
    group = heads // kv_heads
    scores = q.new_full((batch, kv_heads, group, tq, tk), float("-inf"), dtype=torch.float32)
    shared = [id(r.k_pos) for r in regions]
    rotated: dict[tuple[int, float], Tensor] = {}
    narrow = reads_spans(q.device)
    for region in regions:
        a, b = 0, tk
        if narrow:
            cols = region.mask.any(0).nonzero()
            if cols.numel() == 0:
                continue
            a, b = int(cols[0]), int(cols[-1]) + 1
        qr = rotate(q, region.q_pos, region.scale).reshape(batch, kv_heads, group * tq, dim)
        if rotated_keys is not None and region.name in rotated_keys:
            kr = rotated_keys[region.name][:, :, a:b]
        elif shared.count(id(region.k_pos)) > 1:
            key = (id(region.k_pos), region.scale)
            if key not in rotated:
                rotated[key] = rotate(k, region.k_pos, region.scale)
            kr = rotated[key][:, :, a:b]
        else:
            kr = rotate(k[:, :, a:b], region.k_pos[a:b], region.scale)
        part = (qr @ kr.transpose(-1, -2)).view(batch, kv_heads, group, tq, b - a)
        mask = region.mask[:, a:b]
        if narrow and tq == 1 and bool(mask.all()):  # decoding: the span is the region
            scores[..., a:b] = part.float() * scale
        else:
            scores[..., a:b] = torch.where(mask, part.float() * scale, scores[..., a:b])
    weights = scores.softmax(-1).to(v.dtype)                    # (B, Hkv, G, Tq, Tk)
    out = weights.reshape(batch, kv_heads, group * tq, tk) @ v  # (B, Hkv, G*Tq, D)
    return out.view(batch, heads, tq, dim)


#: score elements per block in :func:`blockwise_region_attention` (8 MiB of fp32 scores)
SCORE_BUDGET = 1 << 21


def blockwise_region_attention(q: Tensor, k: Tensor, v: Tensor, q_pos: Tensor, k_pos: Tensor,
                               regions_of: Callable[[Tensor, Tensor], list[Region]],
                               rotate: Rotate, scale: float,
                               block: int | None = None, rising_runs: bool = True) -> Tensor:
    """:func:`region_attention` of causal self-attention, ``block`` queries at a time.

    q (B, H, Tq, D) at ``q_pos`` (Tq,), the last Tq of the keys k, v (B, Hkv, Tk, D) at
    ``k_pos`` (Tk,); ``regions_of(q_pos, k_pos)`` gives a block's regions. A block sees the
    keys up to its last query.

    Every method here maps each key on its own (a region's key positions are a function of
    that key's position alone), so the keys are rotated once per region for all blocks.

    Computed by :func:`~.region_flash.merged_region_attention` (fused passes per region,
    merged by log-sum-exp: no score matrix; ``block`` queries, default
    ``region_flash.QUERY_BLOCK``; ``rising_runs``: the method's
    :attr:`~posenc.methods.regions.RegionMethod.rising_runs`). ``region_flash.MERGED =
    False`` selects the explicit scores of :func:`region_attention` below, for benchmarks:
    (block, Tk) scores, never (Tq, Tk), blocks of about :data:`SCORE_BUDGET` scores by
    default (at least 16 queries).
    """
    if region_flash.MERGED:
        return region_flash.merged_region_attention(q, k, v, q_pos, k_pos, regions_of, rotate,
                                                    scale, block, rising_runs=rising_runs)
    tq, tk = q.shape[2], k.shape[2]
    if block is None:
        block = max(16, SCORE_BUDGET // (q.shape[0] * q.shape[1] * tk))
    if tq <= block:
        return region_attention(q, k, v, regions_of(q_pos, k_pos), rotate, scale)
    by_map: dict[tuple[int, float], Tensor] = {}
    rotated = {}
    for region in regions_of(q_pos[-1:], k_pos):         # the last query's maps: all keys
        key = (id(region.k_pos), region.scale)
        if key not in by_map:
            by_map[key] = rotate(k, region.k_pos, region.scale)
        rotated[region.name] = by_map[key]
    outs = []
    for start in range(0, tq, block):
        end = min(tq, start + block)
        keys = tk - tq + end
        outs.append(region_attention(q[:, :, start:end], k[:, :, :keys], v[:, :, :keys],
                                     regions_of(q_pos[start:end], k_pos[:keys]), rotate,
                                     scale, rotated))
    return torch.cat(outs, 2)
