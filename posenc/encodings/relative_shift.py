"""Per-pair terms read from per-distance tables without a gather (the relative shift).

A term f(row, q_pos_i - k_pos_j) that an encoding computes as a table over the distinct
distances, (..., rows, N) with column c holding distance lo + c, becomes an (..., Lq, Lk)
tensor by indexing. When both position sets are consecutive (training, prefill), the
distance of pair (i, j) is a fixed offset plus i - j, so each row of the result is a window
of its table row that slides one column per row: a strided view of the table
(Transformer-XL's relative shift), with no index tensor and a copy-only backward.
"""

from __future__ import annotations

from torch import Tensor


def is_range(pos: Tensor) -> bool:
    """True if pos (L,) is p0, p0 + 1, ..., p0 + L - 1."""
    n = pos.numel()
    return n > 0 and int(pos[-1]) - int(pos[0]) == n - 1 and (
        n == 1 or bool((pos[1:] - pos[:-1] == 1).all()))


def distance_span(q_pos: Tensor, k_pos: Tensor) -> tuple[int, int]:
    """Smallest and largest distance q_pos_i - k_pos_j."""
    return int(q_pos.min()) - int(k_pos.max()), int(q_pos.max()) - int(k_pos.min())


def sliding_window(table: Tensor, width: int, first: int, step: int) -> Tensor:
    """Rows r of ``table`` (..., R, N) read at columns first + step * r + t, t < width:
    (..., R, width). ``step`` is -1, 0 or 1 columns per row, all reads inside each row."""
    rows, n = table.shape[-2:]
    last = first + step * (rows - 1)
    if min(first, last) < 0 or max(first, last) + width > n:
        raise ValueError(f"window of {width} columns from {first}, step {step}, leaves the "
                         f"{n} columns of the table")
    table = table.contiguous()
    return table.as_strided((*table.shape[:-1], width), (*table.stride()[:-2], n + step, 1),
                            table.storage_offset() + first)
