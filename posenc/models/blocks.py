"""Transformer building blocks: norms, the MLP, and a residual block around attention."""

from __future__ import annotations

import math

import torch.nn.functional as F
from torch import Tensor, nn

from ..attention import AttentionContext, KVCache, MultiHeadAttention
from ..attention.latent import LatentAttention, LatentShape
from ..attention.masks import Window
from ..encodings.base import PositionalEncoding
from ..encodings.checks import require_choice

ACTIVATIONS = ("gelu", "relu", "silu", "swiglu")
NORMS = ("layernorm", "rmsnorm")


def make_norm(kind: str, dim: int, eps: float = 1e-5) -> nn.Module:
    require_choice("norm", kind, NORMS)
    return nn.LayerNorm(dim, eps=eps) if kind == "layernorm" else nn.RMSNorm(dim, eps=eps)


def embedding_init_std(d_model: int) -> float:
    """std of the token embeddings: 1 / sqrt(d_model).

    The embedding is tied to the output projection by default, which reads ``d_model``
    normalised features: 1 / sqrt(fan_in) (LeCun) starts the logits at unit scale. GPT-2's
    fixed 0.02 (logits of std 0.23 at width 128) leaves a narrow model's token identity a
    small part of the residual stream and trains measurably worse (BENCHMARKS.md).
    """
    return 1.0 / math.sqrt(d_model)


def linear_init_std(fan_in: int) -> float:
    """std of a weight matrix reading ``fan_in`` features: sqrt(2 / (5 fan_in)).

    The "small init" of Nguyen & Salazar (2019, "Transformers without Tears"), GPT-NeoX's
    ``small_init``: 0.023 at width 768, where GPT-2's fixed 0.02 was chosen, and larger for
    narrow models (0.056 at width 128), whose activations a fixed 0.02 leaves too small.
    """
    return math.sqrt(2.0 / (5.0 * fan_in))


def init_weights(model: nn.Module, n_residual_layers: int) -> None:
    """Initialise ``model``'s own Linear and Embedding weights; positional encodings are left
    alone (each initialises its own parameters, as its paper does).

    Linear: normal(0, :func:`linear_init_std` (fan_in)), zero biases; the projections that
    write into the residual stream (attention ``out_proj``, MLP ``down``) are further scaled by
    1 / sqrt(``n_residual_layers``) (GPT-2, Radford et al. 2019: "we scale the weights of
    residual layers at initialization by a factor of 1/sqrt(N)"). Embeddings: normal(0,
    :func:`embedding_init_std` (width)).
    """
    positional = {id(m) for pe in model.modules() if isinstance(pe, PositionalEncoding)
                  for m in pe.modules()}
    residual_scale = 1.0 / math.sqrt(max(1, n_residual_layers))
    for name, module in model.named_modules():
        if id(module) in positional:
            continue
        if isinstance(module, nn.Linear):
            std = linear_init_std(module.in_features)
            if name.endswith(RESIDUAL_OUTPUTS):
                std *= residual_scale
            nn.init.normal_(module.weight, std=std)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, std=embedding_init_std(module.embedding_dim))


#: names (suffixes) of the projections that write into the residual stream
RESIDUAL_OUTPUTS = ("attn.out_proj", "cross.out_proj", "mlp.down")


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

    ``pe`` is this layer's own encoding (per-layer parameters, or a layer plan's type);
    otherwise the model passes its shared encoding at call time. ``window``: self-attention
    sees only the keys in this window; ``sinks``: learned sink logits per head; ``latent``:
    self-attention is multi-head latent attention of this shape (decoupled RoPE); ``form``:
    self-attention's form ("softmax" or "stick_breaking"; softmax only with ``latent``).
    """

    def __init__(self, d_model: int, n_heads: int, d_ff: int, *, activation: str = "gelu",
                 norm: str = "layernorm", norm_placement: str = "pre", dropout: float = 0.0,
                 bias: bool = False, cross: bool = False,
                 pe: PositionalEncoding | None = None, norm_eps: float = 1e-5,
                 window: Window | None = None, sinks: bool = False,
                 latent: LatentShape | None = None, form: str = "softmax") -> None:
        super().__init__()
        self.norm_placement = require_choice("norm_placement", norm_placement, ("pre", "post"))
        self.attn = MultiHeadAttention(d_model, n_heads, bias=bias, dropout=dropout,
                                       window=window, sinks=sinks, form=form) if latent is None \
            else LatentAttention(d_model, n_heads, latent, bias=bias, dropout=dropout,
                                 norm_eps=norm_eps)
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

    def forward(self, x: Tensor, ctx: AttentionContext, pe: PositionalEncoding,
                cache: KVCache | None = None, cross_cache: KVCache | None = None,
                cross_pe: PositionalEncoding | None = None) -> tuple[Tensor, Tensor | None]:
        """x (B, T, C) -> (B, T, C) and optional self-attention weights (B, H, T, Lk).

        ``ctx``: this forward's attention context (shared by every block); ``pe``: the
        model's shared encoding (this layer's own one, if any, takes its place); ``cache``,
        ``cross_cache``: this layer's KV caches; ``cross_pe``: cross-attention's encoding.
        """
        pe = self.layer_pe if self.layer_pe is not None else pe
        weights: list[Tensor | None] = [None]

        def self_attn(h: Tensor) -> Tensor:
            out, weights[0] = self.attn(h, ctx, pe, cache)
            return out

        x = self._residual(x, self.norm1, self_attn)
        if self.cross is not None:
            x = self._residual(x, self.norm_cross,
                               lambda h: self.cross(h, ctx, cross_pe, cross_cache)[0])
        x = self._residual(x, self.norm2, self.mlp)
        return x, weights[0]
