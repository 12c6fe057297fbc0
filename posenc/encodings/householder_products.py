"""Attention logits through accumulated Householder-like transforms (PaTH's score), in plain
PyTorch: a blockwise form linear in memory per chunk, the key carry a KV cache keeps, and a
plain reference beside them.

Yang, Shen, Wen, Tan, Mishra, Ren, Panda and Kim, "PaTH Attention: Position Encoding via
Accumulating Householder Transformations", NeurIPS 2025 (arXiv 2505.16381), Section 3. Each
token t carries H_t = I - beta_t w_t w_t^T (|w_t| = 1, beta_t in (0, 2)); the score of query i
and key j <= i is

    s_ij = q_i^T H_i H_{i-1} ... H_{j+1} k_j                  (j = i: the plain q_i . k_j)

Blockwise (Section 3, efficient training: the UT transform of Joffrain et al., 2006): the
product of a chunk's factors H_e ... H_a is I - W^T T diag(beta) W with W (C, D) the chunk's
w's and T = (I + strictly_lower(diag(beta) W W^T))^-1 (applied by triangular solves); its leading
and trailing principal blocks give the products of a chunk's prefixes and suffixes. So each
query is moved to its chunk's start (q^ = q^T H_i ... H_a), each key to its chunk's end
(k^ = H_e ... H_{j+1} k), and a query meets the keys of an earlier chunk after crossing the
whole chunks between them, one (D, D) product per chunk: O(L^2 D) time and, kept for the
backward pass besides the (L, L) logits every bias has, O(L D) per query chunk (O(L^2 D / C)
in all; no (L, L, D, D) products), the chunk pairs at one distance in one batched product.

A KV cache keeps the keys carried to its last token, k~_j = H_n ... H_{j+1} k_j: a new
block's queries meet them after crossing the new tokens only (``prefix`` below), and
:func:`carry_keys` moves them past the block (one rank-one update a key for one new token:
cost linear in the cache), as fla's PaTH layer does when decoding.
"""

from __future__ import annotations

import contextlib

import torch
from torch import Tensor


def _full_precision(device: torch.device):
    """A context that turns autocast off on ``device``: the products of many factors stay
    fp32 under bf16 training."""
    kind = device.type
    if kind in ("cpu", "cuda") and torch.is_autocast_enabled(kind):
        return torch.autocast(kind, enabled=False)
    return contextlib.nullcontext()


def chunk_factors(w: Tensor, beta: Tensor, chunk: int) -> tuple[Tensor, Tensor]:
    """w (B, H, L, D), beta (B, H, L), L a multiple of ``chunk`` -> per chunk the inverse of
    the UT matrix, T^-1 = I + strictly_lower(diag(beta) W W^T) (B, H, n, C, C), and W-beta
    (B, H, n, C, D) (rows beta_s w_s): the product of the chunk's factors up to local s is
    I - W^T T[:s+1, :s+1] (beta W)[:s+1]. T is never formed: :func:`_solve` applies it."""
    b, h, length, d = w.shape
    n = length // chunk
    w = w.reshape(b, h, n, chunk, d)
    wb = w * beta.reshape(b, h, n, chunk, 1)                       # (B, H, n, C, D)
    gram = (wb @ w.transpose(-1, -2)).tril(-1)                     # beta_s w_s . w_r, s > r
    return gram + torch.eye(chunk, dtype=w.dtype, device=w.device), wb


def _solve(ut_inverse: Tensor, rhs: Tensor) -> Tensor:
    """T @ rhs: a unit lower-triangular solve (B, H, n, C, C) x (B, H, n, C, K)."""
    return torch.linalg.solve_triangular(ut_inverse, rhs, upper=False, unitriangular=True)


def _chunks(x: Tensor, chunk: int) -> Tensor:
    """(B, H, L, D) -> (B, H, n, C, D)."""
    b, h, length, d = x.shape
    return x.reshape(b, h, length // chunk, chunk, d)


def _pad_to(x: Tensor, length: int) -> Tensor:
    """Zero rows appended along dim 2 up to ``length``."""
    extra = length - x.shape[2]
    return x if extra == 0 else torch.nn.functional.pad(x, (0, 0, 0, extra))


def path_logits(q: Tensor, k: Tensor, w: Tensor, beta: Tensor, prefix: Tensor | None = None,
                chunk: int = 64) -> tuple[Tensor, Tensor | None]:
    """The scores s_ij of a causal block, in fp32.

    q, k, w: (B, H, L, D) of the block's L tokens (w unit vectors), beta (B, H, L);
    ``prefix``: (B, H, P, D) keys before the block, already carried past every earlier
    token (a KV cache's), or None. Returns the block's scores (B, H, L, L) (zero above the
    diagonal) and the scores against the prefix (B, H, L, P) (None without a prefix).
    """
    with _full_precision(q.device):
        return _path_logits(q, k, w, beta, prefix, chunk)


def _path_logits(q: Tensor, k: Tensor, w: Tensor, beta: Tensor, prefix: Tensor | None,
                 chunk: int) -> tuple[Tensor, Tensor | None]:
    q, k, w, beta = q.float(), k.float(), w.float(), beta.float()
    length = q.shape[2]
    chunk = max(1, min(chunk, length))
    padded = -(-length // chunk) * chunk
    q, k, w = (_pad_to(x, padded) for x in (q, k, w))
    beta = _pad_to(beta[..., None], padded)[..., 0]                  # padding: H = I
    ut_inv, wb = chunk_factors(w, beta, chunk)
    qc, kc, wc = _chunks(q, chunk), _chunks(k, chunk), _chunks(w, chunk)   # (B, H, n, C, D)
    n = qc.shape[2]
    # within a chunk: q_i^T (I - W^T T Wb) k_j over the factors j < s <= i
    qw = (qc @ wc.transpose(-1, -2)).tril()                        # q_i . w_s, s <= i
    wbk = (wb @ kc.transpose(-1, -2)).tril(-1)                     # beta_s w_s . k_j, s > j
    t_wbk = _solve(ut_inv, wbk)                                        # (B, H, n, C, C)
    local = (qc @ kc.transpose(-1, -2)).tril() - qw @ t_wbk
    if n == 1 and prefix is None:                                  # one chunk: nothing crosses
        return local[:, :, 0, :length, :length], None
    t_wb = _solve(ut_inv, wb)                                          # (B, H, n, C, D)
    q_start = qc - qw @ t_wb                                       # q^T H_i ... H_a
    k_end = kc - t_wbk.transpose(-1, -2) @ wc                      # H_e ... H_{j+1} k
    crossing = wc.transpose(-1, -2) @ t_wb                         # (B, H, n, D, D): I - P_c
    blocks = torch.zeros(*q.shape[:2], n, n, chunk, chunk, dtype=q.dtype, device=q.device)
    torch.diagonal(blocks, 0, 2, 3).copy_(local.movedim(2, -1))
    moving, walked = q_start, [q_start[:, :, :1]]                  # chunk I crossed I chunks
    for gap in range(1, n):
        # query chunks gap.. meet key chunks ..n-gap-1 after crossing gap - 1 chunks
        scores = moving[:, :, gap:] @ k_end[:, :, :n - gap].transpose(-1, -2)
        torch.diagonal(blocks, -gap, 2, 3).copy_(scores.movedim(2, -1))
        moving = torch.cat([moving[:, :, :gap],
                            moving[:, :, gap:] - moving[:, :, gap:] @ crossing[:, :, :n - gap]],
                           dim=2)
        walked.append(moving[:, :, gap:gap + 1])
    scores = blocks.transpose(3, 4).reshape(*q.shape[:2], padded, padded)[:, :, :length, :length]
    if prefix is None:
        return scores, None
    crossed = torch.cat(walked, dim=2).reshape(*q.shape[:2], padded, -1)[:, :, :length]
    return scores, crossed @ prefix.float().transpose(-1, -2)        # (B, H, L, P)


def carry_keys(k: Tensor, w: Tensor, beta: Tensor, prefix: Tensor | None = None,
               chunk: int = 64) -> Tensor:
    """Every key carried past the block's last token: the prefix (B, H, P, D) (carried
    past the tokens before the block) and the block's keys k (B, H, L, D), each moved by the
    factors of the block's tokens after it. Returns (B, H, P + L, D) fp32."""
    with _full_precision(k.device):
        return _carry_keys(k, w, beta, prefix, chunk)


def _carry_keys(k: Tensor, w: Tensor, beta: Tensor, prefix: Tensor | None, chunk: int
                ) -> Tensor:
    k, w, beta = k.float(), w.float(), beta.float()
    length = k.shape[2]
    chunk = max(1, min(chunk, length))
    padded = -(-length // chunk) * chunk
    k, w = _pad_to(k, padded), _pad_to(w, padded)
    beta = _pad_to(beta[..., None], padded)[..., 0]
    ut_inv, wb = chunk_factors(w, beta, chunk)
    kc, wc = _chunks(k, chunk), _chunks(w, chunk)
    t_wbk = _solve(ut_inv, (wb @ kc.transpose(-1, -2)).tril(-1))
    k_end = kc - t_wbk.transpose(-1, -2) @ wc                      # (B, H, n, C, D)
    t_wb = _solve(ut_inv, wb)                                      # (B, H, n, C, D)
    low_rank = chunk < k.shape[-1]          # k P_c^T as (k T-Wb^T) W: O(C D) a key, not D^2
    crossing = None if low_rank else wc.transpose(-1, -2) @ t_wb       # (B, H, n, D, D)
    carried = k.new_zeros(*k.shape[:2], 0, k.shape[-1]) if prefix is None else prefix.float()
    for c in range(k_end.shape[2]):
        moved = (carried @ t_wb[:, :, c].transpose(-1, -2)) @ wc[:, :, c] if low_rank else \
            carried @ crossing[:, :, c].transpose(-1, -2)
        carried = torch.cat([carried - moved, k_end[:, :, c]], dim=2)
    return carried[:, :, :carried.shape[2] - (padded - length)]


def path_logits_reference(q: Tensor, k: Tensor, w: Tensor, beta: Tensor) -> Tensor:
    """The scores s_ij (B, H, L, L) one token at a time, from the definition: the keys are
    carried past token i (k <- H_i k for the keys before it) before query i meets them.
    O(L^2 D) time and L steps; for tests and pictures."""
    q, k, w, beta = q.float(), k.float(), w.float(), beta.float()
    length = q.shape[2]
    rows = []
    carried = k.new_zeros(*k.shape[:2], 0, k.shape[-1])
    for i in range(length):
        wi, bi = w[:, :, i:i + 1], beta[:, :, i, None, None]        # (B, H, 1, D), (B, H, 1, 1)
        carried = carried - bi * (carried @ wi.transpose(-1, -2)) * wi   # H_i on keys < i
        carried = torch.cat([carried, k[:, :, i:i + 1]], dim=2)
        row = q[:, :, i:i + 1] @ carried.transpose(-1, -2)         # (B, H, 1, i + 1)
        rows.append(torch.nn.functional.pad(row, (0, length - i - 1)))
    return torch.cat(rows, dim=2)
