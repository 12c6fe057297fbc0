"""A decoder-only Transformer language model that takes any registered positional encoding.

Positions are an explicit (T,) tensor passed down the stack; with a KV cache they continue
from the cache's length, so cached decoding equals a full forward pass for every encoding.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from ..attention import BACKENDS, KVCache, make_caches
from ..attention.cache import replay_if_stale
from ..encodings import build_encoding
from ..encodings.base import (check_positions, check_token_ids, require_choice,
                              require_float_in, require_int_at_least, require_options,
                              require_positive_int)
from .blocks import ACTIVATIONS, NORMS, Block, init_weights, make_norm
from .generate import select_next


@dataclass(frozen=True)
class LMConfig:
    """Shape and options of a :class:`TransformerLM`.

    ``pe`` names a registered encoding and ``pe_options`` are its options (see
    ``posenc list``; None means no options, like {}). ``max_len`` is the training length: the
    size of a learned table and the default original length for RoPE scalings.
    """

    vocab_size: int = 256
    d_model: int = 128
    n_layers: int = 2
    n_heads: int = 4
    max_len: int = 256
    d_ff: int | None = None                 # default 4 * d_model
    activation: str = "gelu"
    norm: str = "layernorm"                 # "layernorm" | "rmsnorm"
    norm_eps: float = 1e-5
    norm_placement: str = "pre"             # "pre" | "post"
    dropout: float = 0.0
    bias: bool = False
    tie_embeddings: bool = True
    pe: str = "rope"
    pe_options: dict[str, Any] = field(default_factory=dict)
    attn_backend: str = "auto"

    def __post_init__(self) -> None:
        for name in ("vocab_size", "d_model", "n_layers", "n_heads", "max_len"):
            require_positive_int(name, getattr(self, name))
        if self.d_model % self.n_heads:
            raise ValueError(f"n_heads={self.n_heads} must divide d_model={self.d_model}")
        if not (isinstance(self.norm_eps, (int, float)) and 0.0 < self.norm_eps < 1.0):
            raise ValueError(f"norm_eps must be a number in (0, 1), got {self.norm_eps!r}")
        if self.d_ff is not None:
            require_positive_int("d_ff", self.d_ff)
        require_float_in("dropout", self.dropout, 0.0, 1.0, low_open=False)
        require_choice("activation", self.activation, ACTIVATIONS)
        require_choice("norm", self.norm, NORMS)
        require_choice("norm_placement", self.norm_placement, ("pre", "post"))
        require_choice("attn_backend", self.attn_backend, BACKENDS)
        for name in ("bias", "tie_embeddings"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be True or False, got {getattr(self, name)!r}")
        if not isinstance(self.pe, str):
            raise ValueError(f"pe must be the name of an encoding (posenc list), got "
                             f"{self.pe!r}")
        object.__setattr__(self, "pe_options", require_options("pe_options", self.pe_options))

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LMConfig:
        valid = set(cls.__dataclass_fields__)
        unknown = sorted(set(data) - valid)
        if unknown:
            raise ValueError(f"unknown LMConfig key(s) {', '.join(unknown)}; valid: "
                             f"{', '.join(sorted(valid))}")
        return cls(**data)


class TransformerLM(nn.Module):
    """Decoder-only LM: ``model(ids) -> logits (B, T, V)``; ``generate`` uses a KV cache."""

    def __init__(self, config: LMConfig) -> None:
        super().__init__()
        self.config = config
        c = config
        self.tok = nn.Embedding(c.vocab_size, c.d_model)
        self.pe = self._build_pe()
        self.blocks = nn.ModuleList(
            Block(c.d_model, c.n_heads, c.d_ff or 4 * c.d_model, activation=c.activation,
                  norm=c.norm, norm_placement=c.norm_placement, dropout=c.dropout,
                  bias=c.bias, pe=self._layer_pe(i), norm_eps=c.norm_eps)
            for i in range(c.n_layers))
        self.norm = (make_norm(c.norm, c.d_model, c.norm_eps) if c.norm_placement == "pre"
                     else nn.Identity())
        self.head = nn.Linear(c.d_model, c.vocab_size, bias=False)
        self.drop = nn.Dropout(c.dropout)
        init_weights(self, 2 * c.n_layers)           # two residual branches per block
        if c.tie_embeddings:
            self.head.weight = self.tok.weight

    def _build_pe(self):
        c = self.config
        return build_encoding(c.pe, n_heads=c.n_heads, head_dim=c.head_dim, max_len=c.max_len,
                              **c.pe_options)

    def _layer_pe(self, index: int):
        """Layer ``index``'s own encoding for per-layer encodings (layer 0 reuses the model's,
        so no parameter sits unused), else None: the layer uses the shared one."""
        if not self.pe.per_layer:
            return None
        return self.pe if index == 0 else self._build_pe()

    def make_caches(self, batch: int, capacity: int) -> list[KVCache]:
        """Empty per-layer KV caches for ``batch`` sequences of up to ``capacity`` tokens."""
        p = self.tok.weight
        return make_caches(self.config.n_layers, batch, self.config.n_heads,
                           self.config.head_dim, capacity, p.dtype, p.device)

    def _check_ids(self, ids: Tensor) -> None:
        if not isinstance(ids, Tensor) or ids.dim() != 2:
            got = f"shape {tuple(ids.shape)}" if isinstance(ids, Tensor) else type(ids).__name__
            raise ValueError(f"ids must be (batch, length), got {got}")
        check_token_ids("ids", ids, self.config.vocab_size)

    def forward(self, ids: Tensor, pos: Tensor | None = None,
                caches: list[KVCache] | None = None, *, backend: str | None = None,
                need_weights: bool = False) -> Tensor | tuple[Tensor, list[Tensor | None]]:
        """ids (B, T) -> logits (B, T, V).

        ``pos`` (T,) defaults to 0..T-1, or to continue after the caches' contents.
        With ``need_weights`` also returns each layer's attention weights (B, H, T, Lk).
        """
        self._check_ids(ids)
        t = ids.shape[1]
        consecutive = pos is None               # positions this model builds form one run
        if pos is None:
            start = caches[0].length if caches else 0
            pos = torch.arange(start, start + t, device=ids.device)
        else:
            check_positions("pos", pos, t)
        if caches:
            ids, pos = replay_if_stale(self.pe, ids, pos, caches,
                                       seq_len=caches[0].length + t if consecutive else None)
        x = self.pe.embed(self.tok(ids), pos, ids=ids,
                          state=caches[0].extra if caches else None)
        x = self.drop(x)                                              # (B, T, C)
        backend = backend or self.config.attn_backend
        all_weights = []
        for i, block in enumerate(self.blocks):
            x, w = block(x, pos, self.pe, causal=True, cache=caches[i] if caches else None,
                         backend=backend, need_weights=need_weights, consecutive=consecutive)
            all_weights.append(w)
        logits = self.head(self.norm(x))[:, -t:]                      # (B, T, V)
        if need_weights:
            return logits, [w if w is None else w[:, :, -t:] for w in all_weights]
        return logits

    @torch.no_grad()
    def generate(self, ids: Tensor, max_new_tokens: int, temperature: float = 0.0,
                 top_k: int | None = None, top_p: float | None = None,
                 generator: torch.Generator | None = None,
                 on_token: Callable[[int, Tensor], None] | None = None) -> Tensor:
        """Append ``max_new_tokens`` tokens to ids (B, T) using a KV cache -> (B, T + new).

        Greedy at temperature 0, else sampled (``top_k``, ``top_p``: see
        :func:`~posenc.models.generate.select_next`). ``on_token(step, tokens (B, 1))`` is
        called as each new token is chosen (for streaming).
        """
        require_int_at_least("max_new_tokens", max_new_tokens, 0)
        self._check_ids(ids)
        caches = self.make_caches(ids.shape[0], ids.shape[1] + max_new_tokens)
        logits = self(ids, caches=caches)
        out = [ids]
        for step in range(max_new_tokens):
            nxt = select_next(logits[:, -1], temperature, top_k, generator, top_p=top_p)
            out.append(nxt)                                           # (B, 1)
            if on_token is not None:
                on_token(step, nxt)
            if step + 1 < max_new_tokens:
                logits = self(nxt, caches=caches)
        return torch.cat(out, dim=1)
