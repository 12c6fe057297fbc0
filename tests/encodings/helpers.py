"""Shared by the encoding tests: encodings built with parameters moved off their small init
(or redrawn at unit scale), random q/k/v, and attention weights."""

import torch

from posenc.attention import attend
from posenc.attention.context import AttentionCall
from posenc.encodings import build_encoding
from posenc.encodings.context import HookContext

H, D = 2, 8
K_POS = torch.tensor([0, 1, 2, 4, 5, 9, 12])     # positions with gaps: no strided layout
Q_POS = K_POS[-3:].clone()                       # a cache-like query block: the last keys


def boost(module: torch.nn.Module, std: float = 0.5) -> None:
    """Move parameters off their small init so position terms are as large as content."""
    torch.manual_seed(1)
    with torch.no_grad():
        for p in module.parameters():
            p.normal_(0.0, std)


def build(name, **options):
    """An encoding of H heads of width D serving positions below 64, at its own init."""
    return build_encoding(name, n_heads=H, head_dim=D, max_len=64, **options)


def randomize(pe, seed=2):
    """Redraw every parameter from N(0, 1) (deterministic); returns pe."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in pe.parameters():
            p.copy_(torch.randn(p.shape, generator=gen))
    return pe


def make(name, options, max_len=64):
    pe = build_encoding(name, n_heads=H, head_dim=D, max_len=max_len, **options)
    boost(pe)
    return pe


def qkv(lq, lk, batch=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(batch, H, lq, D, generator=g), torch.randn(batch, H, lk, D, generator=g),
            torch.randn(batch, H, lk, D, generator=g))


def weights(pe, q, k, v, q_pos, k_pos, causal):
    """Eager attention weights (B, H, Lq, Lk) after the encoding's transform."""
    q, k = pe.transform_qk(q, k, HookContext.for_positions(q_pos, k_pos))
    return attend(q, k, v, pe,
                  AttentionCall.for_positions(q_pos, k_pos, causal=causal, need_weights=True))[1]


def layer_grads_by_backend(pe, backends=("sdpa", "eager"), length=20, seed=7):
    """One causal self-attention layer over ``pe`` in training through each backend
    ("sdpa" runs as the fused CPU attention): {backend: gradients of the input and of every
    parameter of the layer and the encoding}."""
    from posenc.attention import AttentionContext, MultiHeadAttention
    torch.manual_seed(seed)
    d_model = pe.n_heads * pe.head_dim
    attn = MultiHeadAttention(d_model, pe.n_heads)
    x = torch.randn(2, length, d_model, requires_grad=True)
    params = [x, *attn.parameters(), *pe.parameters()]
    grads = {}
    for backend in backends:
        ctx = AttentionContext(torch.arange(length), causal=True, backend=backend)
        out, _ = attn(x, ctx, pe)
        grads[backend] = torch.autograd.grad(
            out, params, torch.randn(out.shape, generator=torch.Generator().manual_seed(1)))
    return grads


def assert_backend_grads_agree(pe) -> None:
    """The input, the projections and the encoding's parameters get the same gradients
    through the fused CPU attention (backend "sdpa" in training) as through eager, and
    none of them is all zero."""
    from torch.testing import assert_close
    grads = layer_grads_by_backend(pe)
    for fused, eager in zip(grads["sdpa"], grads["eager"]):
        assert_close(fused, eager, atol=1e-5, rtol=1e-4)
    assert all(g.abs().sum() > 0 for g in grads["eager"])
