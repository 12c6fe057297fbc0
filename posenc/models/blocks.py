"""Transformer building blocks: norms, the MLP, and a residual block around attention."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from ..attention import KVCache, MultiHeadAttention
from ..encodings.base import PositionalEncoding, require_choice

ACTIVATIONS = ("gelu", "relu", "silu", "swiglu")
NORMS = ("layernorm", "rmsnorm")


def make_norm(kind: str, dim: int, eps: float = 1e-5) -> nn.Module:
    require_choice("norm", kind, NORMS)
    return nn.LayerNorm(dim, eps=eps) if kind == "layernorm" else nn.RMSNorm(dim, eps=eps)


def init_weights(module: nn.Module) -> None:
    """GPT-2 style init for ``model.apply``: normal(0, 0.02) weights, zero biases."""
    if isinstance(module, nn.Linear):
        nn.init.normal_(module.weight, std=0.02)
        if module.bias is not None:
            nn.init.zeros_(module.bias)
    elif isinstance(module, nn.Embedding) and module.weight.shape[1] > 1:
        nn.init.normal_(module.weight, std=0.02)


class MLP(nn.Module):
    """Position-wise feed-forward: (B, T, C) -> (B, T, C); ``swiglu`` gates with SiLU."""

    def __init__(self, d_model: int, d_ff: int, activation: str = "gelu",
                 bias: bool = False, dropout: float = 0.0) -> None:
        super().__init__()
        self.activation = require_choice("activation", activation, ACTIVATIONS)
        width = 2 * d_ff if activation == "swiglu" else d_ff
        self.up = nn.Linear(d_model, width, bias=bias)
        self.down = nn.Linear(d_ff, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        h = self.up(x)
        if self.activation == "swiglu":
            gate, h = h.chunk(2, dim=-1)
            h = F.silu(gate) * h
        else:
            h = {"gelu": F.gelu, "relu": F.relu, "silu": F.silu}[self.activation](h)
        return self.dropout(self.down(h))


class Block(nn.Module):
    """Self-attention (+ optional cross-attention) + MLP with pre- or post-norm residuals.

    ``pe`` is this layer's own encoding when the encoding has per-layer parameters; otherwise
    the model passes its shared encoding at call time.
    """

    def __init__(self, d_model: int, n_heads: int, d_ff: int, *, activation: str = "gelu",
                 norm: str = "layernorm", norm_placement: str = "pre", dropout: float = 0.0,
                 bias: bool = False, cross: bool = False,
                 pe: PositionalEncoding | None = None, norm_eps: float = 1e-5) -> None:
        super().__init__()
        self.norm_placement = require_choice("norm_placement", norm_placement, ("pre", "post"))
        self.attn = MultiHeadAttention(d_model, n_heads, bias=bias, dropout=dropout)
        self.norm1 = make_norm(norm, d_model, norm_eps)
        self.cross = MultiHeadAttention(d_model, n_heads, bias=bias, dropout=dropout,
                                        cross=True) if cross else None
        self.norm_cross = make_norm(norm, d_model, norm_eps) if cross else None
        self.mlp = MLP(d_model, d_ff, activation, bias, dropout)
        self.norm2 = make_norm(norm, d_model, norm_eps)
        self.drop = nn.Dropout(dropout)
        self.layer_pe = pe

    def _residual(self, x: Tensor, norm: nn.Module, fn) -> Tensor:
        if self.norm_placement == "pre":
            return x + self.drop(fn(norm(x)))
        return norm(x + self.drop(fn(x)))

    def forward(self, x: Tensor, pos: Tensor, pe: PositionalEncoding, *, causal: bool,
                cache: KVCache | None = None, memory: Tensor | None = None,
                memory_pos: Tensor | None = None, memory_pe: PositionalEncoding | None = None,
                cross_cache: KVCache | None = None, backend: str = "auto",
                need_weights: bool = False) -> tuple[Tensor, Tensor | None]:
        """x (B, T, C) -> (B, T, C) and optional self-attention weights (B, H, T, Lk)."""
        pe = self.layer_pe if self.layer_pe is not None else pe
        weights: list[Tensor | None] = [None]

        def self_attn(h: Tensor) -> Tensor:
            out, weights[0] = self.attn(h, pos, pe, causal=causal, cache=cache,
                                        backend=backend, need_weights=need_weights)
            return out

        x = self._residual(x, self.norm1, self_attn)
        if self.cross is not None:
            x = self._residual(x, self.norm_cross, lambda h: self.cross(
                h, pos, memory_pe, causal=False, cache=cross_cache, memory=memory,
                memory_pos=memory_pos, backend=backend)[0])
        x = self._residual(x, self.norm2, self.mlp)
        return x, weights[0]
