"""Training-free context extension by remapping RoPE positions per region of (query, key).

Each method here keeps the model's RoPE frequencies and changes which positions a query and
a key are rotated by, depending on where the pair lies (its distance d = i - j, its chunks).
A method returns a list of :class:`Region`: a boolean mask of the (query, key) pairs it
covers and the positions its queries and keys are rotated by there. :func:`region_attention`
rotates the raw (unrotated) q and k once per region, takes the scores of each pair from its
region and applies one softmax. A key cache for these methods therefore keeps raw keys.

Methods (i: query position, j: key position, d = i - j, W / w: windows):

- :class:`SelfExtend` (Jin et al. 2024, "LLM Maybe LongLM: Self-Extend LLM Context Window
  Without Tuning", ICML, Sec. 3; the shift as in the authors' LongLM code): neighbour
  attention with exact positions for d < W; grouped attention beyond, query at
  floor(i / G) + W - W / G, key at floor(j / G), so the relative position
  floor(i / G) - floor(j / G) + W - W / G continues from W.
- :class:`ReRoPE` (Su 2023, "Rectified Rotary Position Embeddings", kexue.fm/archives/9708):
  relative positions d for d < w and w beyond (query at w, key at 0); Leaky ReRoPE
  (``leak=k``): w + (d - w) / k beyond (query at i / k + w (1 - 1 / k), key at j / k).
- :class:`DualChunk` (An et al. 2024, "Training-Free Long-Context Scaling of Large Language
  Models", ICML, Sec. 3; the indices of the authors' ChunkLlama code): chunks of c = s - w
  tokens (s: chunk size, w: local window); keys at j mod c; queries in the key's chunk
  (intra) at i mod c, in the next chunk (successive) at min(c + i mod c, s), further
  (inter) at min(2c - 1, s).
- :class:`StreamingLLM` (Xiao et al. 2023, "Efficient Streaming Language Models with
  Attention Sinks", ICLR 2024, Sec. 3.2): a query sees the first n sink tokens and the last
  m tokens (itself included), positions assigned within the cache: the cache holds n + m
  slots, so a recent key keeps its distance d and a sink key is seen from the last slot,
  query at min(i, n + m - 1), key at j. Older keys are invisible (and evicted from a cache).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch
from torch import Tensor

from ..errors import UserError

#: rotate(x (B, H, T, D), positions (T,), scale) -> x rotated by positions * scale
Rotate = Callable[[Tensor, Tensor, float], Tensor]


@dataclass(frozen=True)
class Region:
    """Pairs ``mask`` (Tq, Tk) bool, whose queries sit at ``q_pos`` (Tq,) and keys at
    ``k_pos`` (Tk,), both in units of ``scale`` positions: integer tensors where whole (a
    rotary table can then look them up), float where fractional."""

    name: str
    mask: Tensor
    q_pos: Tensor
    k_pos: Tensor
    scale: float = 1.0


def _distance(q_pos: Tensor, k_pos: Tensor) -> Tensor:
    return q_pos[:, None] - k_pos[None, :]                     # (Tq, Tk)


def _positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UserError(f"{name} must be a positive integer, got {value!r}")
    return value


@dataclass(frozen=True)
class SelfExtend:
    """Self-Extend: exact positions within ``window`` W, groups of ``group`` G beyond."""

    window: int
    group: int
    name: str = "self_extend"

    def __post_init__(self) -> None:
        _positive_int("window", self.window)
        _positive_int("group", self.group)

    def longest_relative(self, length: int) -> float:
        """The largest relative position a sequence of ``length`` tokens uses."""
        if length <= self.window:
            return length - 1
        return (length - 1) // self.group + self.window - self.window / self.group

    def regions(self, q_pos: Tensor, k_pos: Tensor) -> list[Region]:
        d = _distance(q_pos, k_pos)
        causal = d >= 0
        shift = self.window - self.window / self.group
        return [Region("neighbour", causal & (d < self.window), q_pos, k_pos),
                Region("grouped", d >= self.window,
                       torch.div(q_pos, self.group, rounding_mode="floor") + shift,
                       torch.div(k_pos, self.group, rounding_mode="floor"))]


@dataclass(frozen=True)
class ReRoPE:
    """ReRoPE (``leak=None``): relative positions clipped at ``window`` w; Leaky ReRoPE
    (``leak=k`` > 1): w + (d - w) / k beyond w."""

    window: int
    leak: float | None = None

    def __post_init__(self) -> None:
        _positive_int("window", self.window)
        if self.leak is not None and (isinstance(self.leak, bool) or not isinstance(
                self.leak, (int, float)) or not math.isfinite(self.leak) or self.leak <= 1):
            raise UserError(f"leak must be a number > 1 (the slope 1/k beyond the window), "
                            f"got {self.leak!r}")

    @property
    def name(self) -> str:
        return "rerope" if self.leak is None else "leaky_rerope"

    def longest_relative(self, length: int) -> float:
        d = length - 1
        if d < self.window:
            return d
        return self.window if self.leak is None else self.window + (d - self.window) / self.leak

    def regions(self, q_pos: Tensor, k_pos: Tensor) -> list[Region]:
        d = _distance(q_pos, k_pos)
        near = Region("near", (d >= 0) & (d < self.window), q_pos, k_pos)
        far = d >= self.window
        if self.leak is None:
            return [near, Region("far", far, torch.full_like(q_pos, self.window),
                                 torch.zeros_like(k_pos))]
        # in units of 1 / leak positions: (i + w (k - 1)) / k and j / k, whole keys
        shift = self.window * (self.leak - 1)
        far_q = q_pos + (int(shift) if float(shift).is_integer() else shift)
        return [near, Region("far", far, far_q, k_pos, 1 / self.leak)]


@dataclass(frozen=True)
class DualChunk:
    """Dual Chunk Attention with chunk size s = ``chunk_size`` and ``local_window`` w."""

    chunk_size: int
    local_window: int
    name: str = "dual_chunk"

    def __post_init__(self) -> None:
        _positive_int("chunk_size", self.chunk_size)
        _positive_int("local_window", self.local_window)
        if self.local_window >= self.chunk_size:
            raise UserError(f"local_window must be smaller than chunk_size "
                            f"({self.chunk_size}), got {self.local_window}")

    @property
    def chunk_len(self) -> int:
        """c = s - w: the tokens per chunk."""
        return self.chunk_size - self.local_window

    def longest_relative(self, length: int) -> float:
        return min(length - 1, min(2 * self.chunk_len - 1, self.chunk_size))

    def regions(self, q_pos: Tensor, k_pos: Tensor) -> list[Region]:
        c, s = self.chunk_len, self.chunk_size
        causal = _distance(q_pos, k_pos) >= 0
        q_chunk, k_chunk = q_pos // c, k_pos // c
        gap = q_chunk[:, None] - k_chunk[None, :]               # (Tq, Tk)
        q_in, k_in = q_pos % c, k_pos % c
        return [Region("intra", causal & (gap == 0), q_in, k_in),
                Region("successive", gap == 1, (q_in + c).clamp(max=s), k_in),
                Region("inter", gap >= 2, torch.full_like(q_pos, min(2 * c - 1, s)), k_in)]


@dataclass(frozen=True)
class StreamingLLM:
    """``sinks`` attention-sink tokens plus a rolling ``window`` of recent tokens."""

    sinks: int
    window: int
    name: str = "streaming"

    def __post_init__(self) -> None:
        if isinstance(self.sinks, bool) or not isinstance(self.sinks, int) or self.sinks < 0:
            raise UserError(f"sinks must be an integer >= 0, got {self.sinks!r}")
        _positive_int("window", self.window)

    @property
    def cache_size(self) -> int:
        """n + m: the keys one query sees at most."""
        return self.sinks + self.window

    def longest_relative(self, length: int) -> float:
        return min(length, self.cache_size) - 1

    def regions(self, q_pos: Tensor, k_pos: Tensor, evicted: int = 0) -> list[Region]:
        """``evicted``: tokens dropped from the cache so far (between the sinks and the
        window); recent positions are then counted within the cache (i - evicted)."""
        d = _distance(q_pos, k_pos)
        recent = (d >= 0) & (d < self.window)
        sink = (d >= self.window) & (k_pos < self.sinks)[None, :]
        slot_k = torch.where(k_pos < self.sinks, k_pos, k_pos - evicted)
        return [Region("recent", recent, q_pos - evicted, slot_k),
                Region("sink", sink, q_pos.clamp(max=self.cache_size - 1), k_pos)]

    def kept(self, total: int) -> Tensor:
        """Indices (of ``total`` cached tokens) that the next query still needs: the sinks and
        the last window - 1."""
        sinks = min(self.sinks, total)
        recent = max(sinks, total - (self.window - 1))
        return torch.cat((torch.arange(sinks), torch.arange(recent, total)))


Method = SelfExtend | ReRoPE | DualChunk | StreamingLLM


def reads_spans(device: torch.device) -> bool:
    """Whether region attention on ``device`` reads values back to the host to narrow its
    work: each region's span of keys, a decoding step's full region, a rotary table's size.
    On a CPU such a read costs nothing and saves work; on an accelerator it would wait for the
    device at every layer and step, so there every region scores all keys under its mask and
    rotary angles are computed, not looked up (routed by device type)."""
    return device.type == "cpu"


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
                               block: int | None = None) -> Tensor:
    """:func:`region_attention` of causal self-attention, ``block`` queries at a time.

    q (B, H, Tq, D) at ``q_pos`` (Tq,), the last Tq of the keys k, v (B, Hkv, Tk, D) at
    ``k_pos`` (Tk,); ``regions_of(q_pos, k_pos)`` gives a block's regions. A block sees the
    keys up to its last query.

    Every method here maps each key on its own (a region's key positions are a function of
    that key's position alone), so the keys are rotated once per region for all blocks.

    Computed by :func:`~.region_flash.merged_region_attention` (fused passes per region,
    merged by log-sum-exp: no score matrix; ``block`` queries, default
    ``region_flash.QUERY_BLOCK``). ``region_flash.MERGED = False`` selects the explicit
    scores of :func:`region_attention` below, for benchmarks: (block, Tk) scores, never
    (Tq, Tk), blocks of about :data:`SCORE_BUDGET` scores by default (at least 16 queries).
    """
    from . import region_flash     # imports this module
    if region_flash.MERGED:
        return region_flash.merged_region_attention(q, k, v, q_pos, k_pos, regions_of, rotate,
                                                    scale, block)
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


def build_method(name: str, original: int, factor: float, **options: object) -> Method:
    """The method ``name`` for a model pretrained on ``original`` positions, meant for
    ``original * factor``; ``options`` override the defaults below.

    Defaults: self_extend W = original / 4,
    G = ceil((factor * original - 1 - W) / (original - 1 - W))
    (so the longest relative position stays below ``original``); rerope / leaky_rerope
    w = original / 4, leaky k = (factor * original - w) / (original - w - 1);
    dual_chunk s = 3 * original / 4, w = original / 16 (An et al.'s code);
    streaming 4 sinks and a window of original - 4.
    """
    target = factor * original
    quarter = max(1, original // 4)
    if name == "self_extend":
        window = options.get("window", quarter)
        group = options.get("group", max(1, math.ceil((target - 1 - window) /
                                                      max(1, original - 1 - window))))
        return SelfExtend(window, group)
    if name in ("rerope", "leaky_rerope"):
        window = options.get("window", quarter)
        leak = None
        if name == "leaky_rerope":
            leak = options.get("leak", max(1.0 + 1e-6, (target - window) /
                                           max(1, original - window - 1)))
        return ReRoPE(window, leak)
    if name == "dual_chunk":
        return DualChunk(options.get("chunk_size", max(2, original * 3 // 4)),
                         options.get("local_window", max(1, original // 16)))
    if name == "streaming":
        sinks = options.get("sinks", min(4, original // 2))
        return StreamingLLM(sinks, options.get("window", max(1, original - sinks)))
    raise UserError(f"unknown extension method {name!r}; valid: {', '.join(METHOD_OPTIONS)}")


#: each method's options (build_method keywords)
METHOD_OPTIONS: dict[str, tuple[str, ...]] = {
    "self_extend": ("window", "group"), "rerope": ("window",),
    "leaky_rerope": ("window", "leak"), "dual_chunk": ("chunk_size", "local_window"),
    "streaming": ("sinks", "window"),
}


def relative_positions(method: Method, q_pos: Tensor, k_pos: Tensor) -> Tensor:
    """The relative position each (query, key) pair is scored at under ``method``:
    (Tq, Tk) float, NaN where the pair is masked (the position map, for tests and figures)."""
    out = torch.full((q_pos.numel(), k_pos.numel()), float("nan"))
    for region in method.regions(q_pos, k_pos):
        rel = (region.q_pos[:, None] - region.k_pos[None, :]).float() * region.scale
        out = torch.where(region.mask, rel, out)
    return out
