"""Region attention (:mod:`.extension_methods`) as fused attention passes merged by their
log-sum-exp: no (queries, keys) score matrix, about one plain pass of work per region.

A region method scores each (query, key) pair under the positions of the region that covers
it. Softmax over the union of the regions factors into one softmax per region: with out_r and
lse_r the output and log-sum-exp of attention restricted to region r's pairs,

    lse = logsumexp_r lse_r,    out = sum_r exp(lse_r - lse) * out_r

(the merge of LongLM's flash-attention path of Self-Extend, Jin et al. 2024, and of
FlashAttention's tiles, Dao et al. 2022, Sec. 3.1). Each out_r / lse_r comes from a fused
kernel: on a CPU ``aten::_scaled_dot_product_flash_attention_for_cpu``, on CUDA
``aten::_scaled_dot_product_efficient_attention``, elsewhere (and for a dtype or head size
those refuse) :func:`reference_pass`, plain PyTorch.

On a CPU (:func:`reads_spans`) regions are read on the host, a block of
queries at a time, and narrowed. In every method here a region gives each query one run of
keys [f_i, l_i] whose ends do not decrease from one query to the next (a band, a shifted
causal, chunk steps, sinks), so the first and last queries' runs and the mask between their
starts and between their ends (a few blocks of keys, not the block times all its keys) give
every run; the runs are covered by rectangles: the keys every query sees (no mask), a causal
triangle (the kernel's ``is_causal``, which skips the hidden tiles), and small masked rests.
A region without that shape there is read whole, to the same result. On an accelerator
nothing is read back: each region attends to all keys of the block under its mask.

Shapes: B batch, H query heads, Hkv key heads (H a multiple of Hkv), Tq queries (the last Tq
of the Tk keys), D head size.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import torch
from torch import Tensor

from ..methods.regions import Region

#: rotate(x (B, H, T, D), positions (T,), scale) -> x rotated by positions * scale
Rotate = Callable[[Tensor, Tensor, float], Tensor]


def reads_spans(device: torch.device) -> bool:
    """Whether region attention on ``device`` reads values back to the host to narrow its
    work: each region's span of keys, a decoding step's full region, a rotary table's size.
    On a CPU such a read costs nothing and saves work; on an accelerator it would wait for the
    device at every layer and step, so there every region scores all keys under its mask and
    rotary angles are computed, not looked up (routed by device type)."""
    return device.type == "cpu"


#: False: ``blockwise_region_attention`` takes the explicit-scores path of
#: ``region_attention`` instead (for benchmarks that compare the two)
MERGED = True

#: queries per block of a prefill
QUERY_BLOCK = 256

#: a masked rectangle this sparse, of at least twice this many queries, is split in two
SPLIT_DENSITY, MIN_ROWS = 0.5, 32

#: (q (B, H, n, D), k and v (B, H, m, D), mask (n, m) bool or None, causal, scale)
#: -> out (B, H, n, D) in q's dtype, lse (B, H, n) fp32; ``causal``: query r sees keys c <= r
Pass = Callable[[Tensor, Tensor, Tensor, "Tensor | None", bool, float], tuple[Tensor, Tensor]]

#: a merged part: first query row, out (B, H, rows, D), lse (B, H, rows)
Part = tuple[int, Tensor, Tensor]


def reference_pass(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, causal: bool,
                   scale: float) -> tuple[Tensor, Tensor]:
    """Explicit scores, log-sum-exp and softmax in fp32; a row with no pair gets lse = -inf
    and out = 0."""
    scores = (q.float() @ k.float().transpose(-1, -2)) * scale          # (B, H, n, m)
    if causal:
        tril = torch.ones(scores.shape[-2:], dtype=torch.bool, device=q.device).tril()
        mask = tril if mask is None else mask & tril
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    lse = scores.logsumexp(-1)                                          # (B, H, n)
    weights = (scores - lse.masked_fill(lse == float("-inf"), 0)[..., None]).exp()
    return weights.to(v.dtype) @ v, lse


def _additive(mask: Tensor, dtype: torch.dtype, columns: int | None = None) -> Tensor:
    """0 where ``mask`` (n, m) holds, -inf elsewhere; ``columns``: allocated width >= m."""
    bias = torch.zeros(mask.shape[0], columns or mask.shape[1], dtype=dtype,
                       device=mask.device)[:, :mask.shape[1]]
    return bias.masked_fill_(~mask, float("-inf"))


def cpu_flash_pass(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, causal: bool,
                   scale: float) -> tuple[Tensor, Tensor]:
    """PyTorch's CPU flash attention. It takes an additive mask only, and gives a row with no
    pair lse = 0 (callers never pass one, or mark it: :func:`_narrowed_parts`)."""
    bias = None if mask is None else _additive(mask, q.dtype)
    return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
        q, k, v, is_causal=causal, attn_mask=bias, scale=scale)


def cuda_efficient_pass(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, causal: bool,
                        scale: float) -> tuple[Tensor, Tensor]:
    """PyTorch's memory-efficient CUDA attention (its lse is padded to 32 rows; its bias rows
    are allocated 16-aligned, as ``scaled_dot_product_attention`` does)."""
    bias = None
    if mask is not None:
        n, m = mask.shape
        bias = _additive(mask, q.dtype, (m + 15) // 16 * 16).expand(q.shape[0], q.shape[1],
                                                                     n, m)
    out, lse = torch.ops.aten._scaled_dot_product_efficient_attention(
        q, k, v, bias, True, 0.0, causal, scale=scale)[:2]
    return out, lse[..., :q.shape[2]]


def attention_pass(device: torch.device, dtype: torch.dtype, head_dim: int) -> Pass:
    """The fused pass for tensors on ``device`` (by its type), or :func:`reference_pass`."""
    if device.type == "cpu" and dtype in (torch.float32, torch.float64, torch.bfloat16,
                                          torch.float16):
        return cpu_flash_pass
    if device.type == "cuda" and dtype in (torch.float32, torch.bfloat16, torch.float16) \
            and head_dim % 8 == 0:
        return cuda_efficient_pass
    return reference_pass


def merged_region_attention(q: Tensor, k: Tensor, v: Tensor, q_pos: Tensor, k_pos: Tensor,
                            regions_of: Callable[[Tensor, Tensor], list[Region]],
                            rotate: Rotate, scale: float, block: int | None = None, *,
                            attend: Pass | None = None, rising_runs: bool = True) -> Tensor:
    """Causal region attention: q (B, H, Tq, D) at ``q_pos`` (Tq,), the last Tq of the raw
    keys k, v (B, Hkv, Tk, D) at ``k_pos`` (Tk,) -> (B, H, Tq, D).

    ``regions_of(q_pos, k_pos)`` gives the regions of any queries against any keys (a pair's
    region and positions depend on its two positions alone); ``block`` queries at a time
    (default :data:`QUERY_BLOCK`), each against the keys up to its last query. ``attend``:
    the pass (default :func:`attention_pass` of q's device and dtype). Every method maps each
    key on its own, so keys are rotated once per distinct key map (and copied to the H query
    heads once) for all blocks. ``rising_runs``: the regions give each query one run of keys
    whose ends rise with the query (the method declares it:
    :attr:`posenc.methods.regions.RegionMethod.rising_runs`); only then is a region narrowed
    on a CPU from its ends (module docstring), else every region is read whole.
    """
    heads, tq, dim = q.shape[1:]
    group = heads // k.shape[1]
    tk = k.shape[2]
    attend = attention_pass(q.device, q.dtype, dim) if attend is None else attend
    block = QUERY_BLOCK if block is None else block
    narrow = reads_spans(q.device) and rising_runs
    if narrow and tq <= block:
        # one block (decoding, a short prefill): rotate only the keys it reads, and read
        # them as they are, the query heads of a key head passed as its rows
        parts = []
        ends = {r.name: r for r in regions_of(q_pos[[0, -1]], k_pos)}  # all keys' maps
        for region, rects in _block_cover(regions_of, q_pos, k_pos, ends):
            lo, hi = min(r[2] for r in rects), max(r[3] for r in rects)
            k_map = ends[region.name]
            keys = rotate(k[:, :, lo:hi], k_map.k_pos[lo:hi], k_map.scale)  # (B, Hkv, n, D)
            q_rot = rotate(q, region.q_pos, region.scale)               # (B, H, Tq, D)
            parts += _rect_parts(q_rot, keys, v[:, :, lo:hi], rects, scale, attend, lo, group)
        return _merge(parts, q)
    by_map: dict[tuple[int, float], Tensor] = {}
    keys: dict[str, Tensor] = {}                       # region name -> (B, H, Tk, D) rotated
    for region in regions_of(q_pos[-1:], k_pos):       # the last query's maps: all keys
        key = (id(region.k_pos), region.scale)
        if key not in by_map:
            by_map[key] = _expand_heads(rotate(k, region.k_pos, region.scale), group)
        keys[region.name] = by_map[key]
    values = _expand_heads(v, group)                   # (B, H, Tk, D)
    outs = []
    for start in range(0, tq, block):
        end = min(tq, start + block)
        seen = tk - tq + end                           # keys up to the block's last query
        q_block, k_seen = q[:, :, start:end], k_pos[:seen]
        parts: list[Part] = []
        if narrow:
            for region, rects in _block_cover(regions_of, q_pos[start:end], k_seen):
                q_rot = rotate(q_block, region.q_pos, region.scale)    # (B, H, n, D)
                parts += _rect_parts(q_rot, keys[region.name], values, rects, scale, attend)
        else:
            for region in regions_of(q_pos[start:end], k_seen):
                q_rot = rotate(q_block, region.q_pos, region.scale)
                parts.append(_masked_part(q_rot, keys[region.name][:, :, :seen],
                                          values[:, :, :seen], region.mask, scale, attend))
        outs.append(_merge(parts, q_block))
    return outs[0] if len(outs) == 1 else torch.cat(outs, 2)


def _expand_heads(x: Tensor, group: int) -> Tensor:
    """(B, Hkv, T, D) -> (B, Hkv * group, T, D): query head h reads key head h // group."""
    if group == 1:
        return x
    batch, kv_heads, length, dim = x.shape
    return x[:, :, None].expand(batch, kv_heads, group, length, dim).reshape(
        batch, kv_heads * group, length, dim)


def _masked_part(q: Tensor, k: Tensor, v: Tensor, mask: Tensor, scale: float,
                 attend: Pass) -> Part:
    """All keys under ``mask`` (n, m), read nowhere but on q's device; rows the mask leaves
    empty get lse = -inf and out = 0 whatever the kernel makes of them."""
    out, lse = attend(q, k, v, mask, False, scale)
    empty = ~mask.any(1)                                                # (n,)
    return 0, out.masked_fill(empty[:, None], 0), lse.masked_fill(empty, float("-inf"))


# ---------------------------------------------------------------- narrowing on a CPU

#: (first row, end row, first key, end key, kind, mask (rows, keys) or None): kind "full"
#: (every pair), "causal" (key c - first key <= row r - first row), "runs" (the mask's
#: pairs, at least one per row) or "whole" (the mask's pairs, rows may have none)
Rect = tuple[int, int, int, int, str, "Tensor | None"]


def _rect_parts(q: Tensor, k: Tensor, v: Tensor, rects: list[Rect], scale: float,
                attend: Pass, first_key: int = 0, group: int = 1) -> list[Part]:
    """One pass per rectangle; k and v (B, H / group, m, D) hold the keys from
    ``first_key`` on. With ``group`` > 1 the query heads of a key head go as its rows
    (B, H / group, group * rows, D), their mask repeated; a causal rectangle copies its keys
    to the query heads instead (its rows must stay the query's)."""
    parts = []
    for r0, r1, c0, c1, kind, mask in rects:
        qr, cols = q[:, :, r0:r1], slice(c0 - first_key, c1 - first_key)
        kr, vr = k[:, :, cols], v[:, :, cols]
        batch, heads, rows, dim = qr.shape
        if kind == "causal" or group == 1:
            kr, vr = _expand_heads(kr, group), _expand_heads(vr, group)
            out, lse = attend(qr, kr, vr, mask, kind == "causal", scale)
        else:
            folded = qr.reshape(batch, heads // group, group * rows, dim)
            out, lse = attend(folded, kr, vr, None if mask is None else mask.repeat(group, 1),
                              kind == "causal", scale)
            out, lse = out.reshape(batch, heads, rows, dim), lse.reshape(batch, heads, rows)
        if kind == "whole":
            empty = ~mask.any(1)                                        # (rows,)
            out = out.masked_fill(empty[:, None], 0)
            lse = lse.masked_fill(empty, float("-inf"))
        parts.append((r0, out, lse))
    return parts


def _run(row: Tensor) -> tuple[int, int] | None:
    """(first, last) key of a (m,) bool row that holds one run of True; None if none;
    (-1, -1) if several."""
    hits = row.nonzero()
    if hits.numel() == 0:
        return None
    a, b = int(hits[0]), int(hits[-1])
    return (a, b) if b - a + 1 == hits.numel() else (-1, -1)


def _block_cover(regions_of: Callable[[Tensor, Tensor], list[Region]], q_pos: Tensor,
                 k_pos: Tensor, ends: dict[str, Region] | None = None
                 ) -> list[tuple[Region, list[Rect]]]:
    """Each region of the queries ``q_pos`` (n,) against the keys ``k_pos`` with rectangles
    covering exactly its pairs, without building its (n, keys) mask.

    A region whose every query sees one run of keys [f_i, l_i], f and l non-decreasing over
    the queries that see any (as every method here: a band, a shifted causal, chunk steps,
    sinks), is known from its first and last such queries and the keys between their f and
    between their l: only those (queries x a few blocks of keys) are evaluated. A region
    that does not have that shape there is evaluated whole and passed with its mask.
    ``ends``: the regions of the first and last queries against all keys, if known.
    """
    n = q_pos.numel()
    if ends is None:
        ends = {r.name: r for r in regions_of(q_pos[[0, n - 1]], k_pos)}
    #: name -> first and end query with a run, the first one's run, the last one's run
    runs: dict[str, tuple[int, int, tuple[int, int] | None, tuple[int, int] | None]] = {}
    for name, region in ends.items():
        first, last = _run(region.mask[0]), _run(region.mask[1])
        a, b = 0, n
        if first is None and last is not None:        # the region starts inside the block
            a, first = _search_rows(regions_of, q_pos, k_pos, name, 0, n - 1, True)
        elif last is None and first is not None:      # the region stops inside the block
            b, last = _search_rows(regions_of, q_pos, k_pos, name, 0, n - 1, False)
            b += 1
        runs[name] = (a, b, first, last)
    # the keys between the first and last query's starts, and between their ends
    spans = [torch.arange(lo, hi) for _, _, first, last in runs.values()
             if _monotone(first, last)
             for lo, hi in ((first[0], last[0]), (first[1] + 1, last[1] + 1))]
    cols = torch.unique(torch.cat(spans)) if spans else k_pos.new_zeros(0)
    if n == 1 and cols.numel() == 0:                  # decoding: its one query's regions
        zone = {name: replace(r, mask=r.mask[:1], q_pos=r.q_pos[:1]) for name, r in
                ends.items()}
    else:
        zone = {r.name: r for r in regions_of(q_pos, k_pos[cols])}
    out = []
    for name, (a, b, first, last) in runs.items():
        bounds = _row_runs(zone[name].mask, cols, a, b, first, last) \
            if _monotone(first, last) else None
        if bounds is not None:
            out.append((zone[name], interval_cover(*bounds, a)))
            continue
        # not one run per query with rising ends (or empty at both ends): read it whole
        whole = {r.name: r for r in regions_of(q_pos, k_pos)}[name]
        if bool(whole.mask.any()):
            out.append((whole, [(0, n, 0, k_pos.numel(), "whole", whole.mask)]))
    return out


def _monotone(first: tuple[int, int] | None, last: tuple[int, int] | None) -> bool:
    """Whether two runs (first, last key) could be the ends of rising runs."""
    return first is not None and last is not None and first[0] >= 0 and last[0] >= 0 \
        and first[0] <= last[0] and first[1] <= last[1]


def _search_rows(regions_of, q_pos: Tensor, k_pos: Tensor, name: str, lo: int, hi: int,
                 rising: bool) -> tuple[int, tuple[int, int]]:
    """The first (``rising``) or last query in [lo, hi] whose run of region ``name`` is not
    empty, and that run; the queries with a run are contiguous (one row read per step)."""
    found: dict[int, tuple[int, int] | None] = {}

    def run(i: int):
        if i not in found:
            mask = {r.name: r for r in regions_of(q_pos[i:i + 1], k_pos)}[name].mask
            found[i] = _run(mask[0])
        return found[i]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if (run(mid) is None) == rising:
            lo = mid
        else:
            hi = mid
    row = hi if rising else lo
    return row, run(row) or (-1, -1)


def _row_runs(mask: Tensor, cols: Tensor, a: int, b: int, first: tuple[int, int],
              last: tuple[int, int]) -> tuple[list[int], list[int]] | None:
    """Each query's run [f_i, l_i] (queries a..b-1) from ``mask`` (n, len(cols)) over the
    keys ``cols`` that lie between the first and last query's starts and ends; None where the
    mask there is not that of such runs."""
    (f0, l0), (f1, l1) = first, last
    starts = _between(mask[a:b], cols, f0, f1)               # (rows, f1 - f0)
    stops = _between(mask[a:b], cols, l0 + 1, l1 + 1)        # (rows, l1 - l0)
    rows = torch.arange(b - a)
    f = torch.where(starts.any(1), f0 + starts.int().argmax(1), f1) if f1 > f0 else \
        torch.full_like(rows, f0)
    l = torch.where(stops.any(1), l1 - stops.flip(1).int().argmax(1), l0) if l1 > l0 else \
        torch.full_like(rows, l0)
    if bool((f > l).any()) or bool((f.diff() < 0).any()) or bool((l.diff() < 0).any()):
        return None
    for part, lo in ((starts, f0), (stops, l0 + 1)):         # the mask is exactly the runs
        keys = torch.arange(lo, lo + part.shape[1])
        if not torch.equal(part, (keys >= f[:, None]) & (keys <= l[:, None])):
            return None
    return f.tolist(), l.tolist()


def _between(mask: Tensor, cols: Tensor, lo: int, hi: int) -> Tensor:
    """The columns of ``mask`` for the keys lo..hi-1 (all in the sorted ``cols``)."""
    at = int(torch.searchsorted(cols, lo)) if hi > lo else 0
    return mask[:, at:at + max(0, hi - lo)]


def interval_cover(f: list[int], l: list[int], row: int = 0) -> list[Rect]:
    """Rectangles covering exactly the pairs of queries row, row+1, ... that see the keys
    f[i]..l[i] (f and l non-decreasing, f <= l), each pair once: the keys every query sees
    go whole; the rest (a band's edges, a shifted diagonal, chunk steps) as a causal
    triangle, whole, or masked, split by queries while sparse."""
    n = len(f)
    whole_lo, whole_hi = f[-1], l[0]                          # keys every query sees
    if whole_lo > whole_hi:
        if n >= 2 * MIN_ROWS:
            half = n // 2
            return interval_cover(f[:half], l[:half], row) + \
                interval_cover(f[half:], l[half:], row + half)
        return _ragged(f, l, row)
    rects: list[Rect] = [(row, row + n, whole_lo, whole_hi + 1, "full", None)]
    left = sum(1 for x in f if x < whole_lo)                  # queries starting earlier
    if left:
        rects += _ragged(f[:left], [whole_lo - 1] * left, row)
    right = sum(1 for x in l if x <= whole_hi)                # queries ending later: after
    if right < n:
        rects += _ragged([whole_hi + 1] * (n - right), l[right:], row + right)
    return rects


def _ragged(f: list[int], l: list[int], row: int) -> list[Rect]:
    n, c0, c1 = len(f), f[0], l[-1] + 1
    if f == [c0] * n:
        if l == [c1 - 1] * n:
            return [(row, row + n, c0, c1, "full", None)]
        if l == list(range(c0, c0 + n)):
            return [(row, row + n, c0, c1, "causal", None)]
    pairs = sum(l) - sum(f) + n
    if n >= 2 * MIN_ROWS and pairs < SPLIT_DENSITY * n * (c1 - c0):
        half = n // 2
        return interval_cover(f[:half], l[:half], row) + \
            interval_cover(f[half:], l[half:], row + half)
    keys = torch.arange(c0, c1)
    mask = (keys >= torch.tensor(f)[:, None]) & (keys <= torch.tensor(l)[:, None])
    return [(row, row + n, c0, c1, "runs", mask)]


def _merge(parts: list[Part], q: Tensor) -> Tensor:
    """sum_p exp(lse_p - lse) out_p over the parts placed at their rows of q (B, H, n, D);
    rows no part covers are 0."""
    batch, heads, n, dim = q.shape
    lse = q.new_full((len(parts), batch, heads, n), float("-inf"), dtype=torch.float32)
    for i, (r0, out, part_lse) in enumerate(parts):
        lse[i, :, :, r0:r0 + out.shape[2]] = part_lse
    total = lse.logsumexp(0)                                            # (B, H, n)
    total = total.masked_fill(total == float("-inf"), 0)
    merged = q.new_zeros((batch, heads, n, dim), dtype=torch.float32)
    for i, (r0, out, _) in enumerate(parts):
        rows = slice(r0, r0 + out.shape[2])
        weight = (lse[i, :, :, rows] - total[:, :, rows]).exp()          # (B, H, rows)
        merged[:, :, rows].addcmul_(weight[..., None], out.float())
    return merged.to(q.dtype)
