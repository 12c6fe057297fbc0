"""Use one posenc encoding inside your own attention code.

An encoding is an nn.Module with hooks; your attention calls the ones it needs:

    at = HookContext.for_positions(q_pos, k_pos, causal=True)   # positions + what you promise
    q, k = pe.transform_qk(q, k, at)             # RoPE, xPos; others: q, k as is
    bias = pe.score_bias(q, k, at)               # ALiBi, T5, KERPLE, FIRE; or None
    logits = q @ k.transpose(-2, -1) * pe.sm_scale() + bias  # then mask, softmax, @ v

Positions are integer tensors: (T,) shared by the batch, or (B, T) with one row per
sequence. Each function below is one way to wire the hooks; main() checks every one against
attention written out by hand and exits with status 1 if any differs.

Not shown: absolute encodings (sinusoidal, learned, ...) mix positions into the token
embeddings before attention, ``x = pe.embed(x, pos)``; Shaw's ``pe.value_term`` is computed
from the attention weights, so it needs attention written out; with the ``logn_base_len``
option, multiply each query by its factor ``pe.attn_scale(at)``.

Run: python examples/own_attention.py   (CPU, no downloads; most of its few seconds go to
compiling FlexAttention)
"""

from __future__ import annotations

import sys

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

import posenc
from posenc import HookContext

B, H, T, D = 2, 4, 16, 32          # batch, heads, tokens, head_dim (flex on CPU: D >= 32)
TOLERANCE = 1e-5

#: FlexAttention runs compiled (on CPU, forward only: call it under torch.no_grad())
flex = torch.compile(flex_attention)


def causal_visible(lq: int, lk: int) -> Tensor:
    """(Lq, Lk) bool, True where query i sees key j. The queries are the last Lq of the Lk
    keys (a KV cache holds the earlier ones), so query i sees keys j <= i + Lk - Lq."""
    return torch.ones(lq, lk, dtype=torch.bool).tril(lk - lq)


def additive(visible: Tensor) -> Tensor:
    """A boolean mask as a float one: 0 where visible, -inf where hidden."""
    return torch.zeros(visible.shape).masked_fill(~visible, float("-inf"))


def reference(q: Tensor, k: Tensor, v: Tensor, scale: float, bias: Tensor | None,
              visible: Tensor) -> Tensor:
    """Attention written out: softmax(q.k * scale + bias, hidden pairs at -inf) @ v."""
    logits = q @ k.transpose(-2, -1) * scale                      # (B, H, Lq, Lk)
    if bias is not None:
        logits = logits + bias
    logits = logits.masked_fill(~visible, float("-inf"))
    return logits.softmax(dim=-1) @ v                             # (B, H, Lq, D)


def max_difference(a: Tensor, b: Tensor) -> float:
    return (a - b).abs().max().item()


# Take away: RoPE only rotates q and k by their positions. Rotate them, then call any
# attention kernel unchanged, with its own causal mask. (SDPA's is_causal=True lines queries
# up with the first keys: right for Lq == Lk only; with a KV cache pass causal_visible.)
def rope_sdpa(q: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
    pe = posenc.build_encoding("rope", n_heads=H, head_dim=D, max_len=T)
    pos = torch.arange(T)                                         # (T,) shared by the batch
    q, k = pe.transform_qk(q, k, HookContext.for_positions(pos))  # (B, H, T, D) each
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=pe.sm_scale())
    return out, reference(q, k, v, pe.sm_scale(), None, causal_visible(T, T))


# Take away: a bias encoding gives an additive logits term; add it to a -inf causal mask
# and pass the sum as SDPA's float attn_mask, with scale=pe.sm_scale().
# The causal contract: with causal=True you promise that each query sees only the keys up to
# itself, and score_bias may then hold ANY finite value at the hidden pairs (k_pos > q_pos):
# ALiBi's causal form is m * (j - i), positive there. Mask them; never read their values.
def bias_sdpa(pe: posenc.PositionalEncoding, q: Tensor, k: Tensor, v: Tensor,
              k_pos: Tensor) -> tuple[Tensor, Tensor]:
    lq, lk = q.shape[2], k.shape[2]
    q_pos = k_pos[-lq:]                                           # the last Lq keys
    at = HookContext.for_positions(q_pos, k_pos, causal=True)
    bias = pe.score_bias(q, k, at)                                # (1, H, Lq, Lk), fp32
    visible = causal_visible(lq, lk)
    attn_mask = (bias + additive(visible)).to(q.dtype)            # -inf at hidden pairs
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, scale=pe.sm_scale())
    return out, reference(q, k, v, pe.sm_scale(), bias, visible)


# Take away: score_mod is the same term for FlexAttention, which never builds the
# (B, H, Lq, Lk) bias; the causal mask becomes a block_mask (skipped blocks cost nothing).
# q_idx and kv_idx index the position tensors of the HookContext you pass to score_mod.
def bias_flex(pe: posenc.PositionalEncoding, q: Tensor, k: Tensor, v: Tensor,
              k_pos: Tensor) -> tuple[Tensor, Tensor]:
    lq, lk = q.shape[2], k.shape[2]
    q_pos = k_pos[-lq:]
    at = HookContext.for_positions(q_pos, k_pos, causal=True)
    score_mod = pe.score_mod(q, k, at)

    def causal(b, h, q_idx, kv_idx):
        return kv_idx <= q_idx + (lk - lq)

    block_mask = create_block_mask(causal, B=None, H=None, Q_LEN=lq, KV_LEN=lk,
                                   device=q.device)
    with torch.no_grad():
        out = flex(q, k, v, score_mod=score_mod, block_mask=block_mask, scale=pe.sm_scale())
    bias = pe.score_bias(q, k, at)
    return out, reference(q, k, v, pe.sm_scale(), bias, causal_visible(lq, lk))


# One attention for every encoding whose hooks are transform_qk and score_bias: each hook
# does nothing where an encoding lacks it. ``visible`` is (Lq, Lk) or (B, 1, Lq, Lk).
def attention(pe: posenc.PositionalEncoding, q: Tensor, k: Tensor, v: Tensor,
              q_pos: Tensor, k_pos: Tensor, visible: Tensor) -> tuple[Tensor, Tensor]:
    at = HookContext.for_positions(q_pos, k_pos, causal=True)
    q, k = pe.transform_qk(q, k, at)
    bias = pe.score_bias(q, k, at)                                # None, (1|B, H, Lq, Lk)
    attn_mask = additive(visible) if bias is None else bias + additive(visible)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask.to(q.dtype),
                                         scale=pe.sm_scale())
    return out, reference(q, k, v, pe.sm_scale(), bias, visible)


# Take away: per-sample positions are a (B, T) tensor. In a left-padded batch each row counts
# its real tokens only (padding repeats position 0), and a padding mask hides the padding
# keys from every query; a padding query sees itself only, so its row stays finite (a row
# with no visible key would be NaN). Each row then equals its prompt run alone.
def left_padded(pe: posenc.PositionalEncoding, q: Tensor, k: Tensor, v: Tensor,
                lengths: list[int]) -> tuple[Tensor, Tensor, float]:
    """Returns the batch's output, the reference and how far each row is from its prompt
    attended alone (the largest difference over the real tokens)."""
    t = q.shape[2]
    real = torch.arange(t)[None, :] >= t - torch.tensor(lengths)[:, None]   # (B, T)
    pos = (real.cumsum(dim=1) - 1).clamp(min=0)                   # (B, T): 0 .. 0 1 2 3 4
    own = torch.eye(t, dtype=torch.bool)                          # each query's own key
    visible = causal_visible(t, t) & (real[:, None, None, :] | own)         # (B, 1, T, T)
    out, ref = attention(pe, q, k, v, pos, pos, visible)
    worst = 0.0
    for b, n in enumerate(lengths):                               # each prompt alone
        rows = (slice(b, b + 1), slice(None), slice(t - n, None))  # its n real tokens
        alone_pos = torch.arange(n)
        alone, _ = attention(pe, q[rows], k[rows], v[rows], alone_pos, alone_pos,
                             causal_visible(n, n))
        worst = max(worst, max_difference(out[rows], alone))
    return out, ref, worst


def main() -> int:
    torch.manual_seed(0)
    q, k, v = (torch.randn(B, H, T, D) for _ in range(3))         # (B, H, T, D) each
    pos = torch.arange(T)
    alibi = posenc.build_encoding("alibi", n_heads=H, head_dim=D, max_len=T)
    t5 = posenc.build_encoding("t5", n_heads=H, head_dim=D, max_len=T)
    with torch.no_grad():           # stand-in for trained weights (T5 starts near 0)
        for param in t5.parameters():
            param.normal_(0.0, 1.0)

    checks = {"rope   sdpa, is_causal": max_difference(*rope_sdpa(q, k, v))}
    for name, pe in (("alibi", alibi), ("t5", t5)):
        out, ref = bias_sdpa(pe, q, k, v, pos)
        checks[f"{name:6} sdpa, float mask"] = max_difference(out, ref)
        cached, _ = bias_sdpa(pe, q[:, :, -4:], k, v, pos)        # a KV cache's next 4
        checks[f"{name:6} sdpa, 4 queries after 12 cached keys"] = max_difference(
            cached, ref[:, :, -4:])
        checks[f"{name:6} flex, score_mod + block_mask"] = max_difference(
            *bias_flex(pe, q, k, v, pos))
    lengths = [5, T]                                              # two prompts, left-padded
    for name, pe in (("rope", posenc.build_encoding("rope", n_heads=H, head_dim=D)),
                     ("alibi", alibi)):
        out, ref, alone = left_padded(pe, q, k, v, lengths)
        checks[f"{name:6} left-padded (B, T) positions"] = max_difference(out, ref)
        checks[f"{name:6} left-padded rows = each prompt alone"] = alone

    failed = 0
    for label, difference in checks.items():
        ok = difference <= TOLERANCE
        failed += not ok
        print(f"{'ok  ' if ok else 'FAIL'}  {label:46} max |difference| {difference:.1e}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
