"""Complex-valued word-order embeddings (Wang et al., ICLR 2020, "Encoding word order in
complex embeddings").

Word j at position k is embedded as the complex vector

    z_{j,k} = r_j ⊙ exp(i (ω_j k + θ_j))        (amplitude, frequency, phase per word)

so moving a word by n positions multiplies it by exp(i ω_j n): the same linear map for every
k (the paper's "position-free offset transformation"), and the amplitude is position-free.

Design here. The model's token embedding ``x = tok(ids)`` *is* the amplitude r_j (it is
the word's position-free vector, and with tied embeddings the output head keeps using it);
this encoding owns the per-word frequency ω (V, C) and initial phase θ (V, C) tables, looked
up with ``ids``, so it needs ``vocab_size``. The real Transformer that follows consumes

    W_re (r ⊙ cos φ) + W_im (r ⊙ sin φ),      φ = ω_j k + θ_j,

a learned real projection (C, 2C) of the concatenated real and imaginary parts, initialised to
[I, 0] (the real part alone; the imaginary pathway is learned).

What is not the paper: the paper's Transformer is complex throughout (complex linear maps,
complex attention scores, complex-aware nonlinearities), keeping real and imaginary parts
coupled in every layer. Here only the embedding is complex; after the projection the network
is the ordinary real-valued Transformer, so the exact offset property holds for the
embedding ``complex_embedding`` returns, not for the hidden states.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from ..errors import UserError
from .base import PositionalEncoding, register
from .checks import check_in_range, require_float_in, require_positive_int


@register("complex_order")
class ComplexOrderEncoding(PositionalEncoding):
    """Word-dependent frequencies and phases turn the token embedding into a complex wave.

    Options:
        vocab_size: size of the frequency and phase tables (token ids must be below it); a
            model passes its own vocabulary size.
        freq_base: frequencies start at the sinusoidal profile base^(-i/C) for every word
            (10000, > 1); they are then learned per word.
    Phases start uniform in [0, 2π).
    """

    family = "absolute"
    extrapolates = "defined at any length (unseen positions still hurt)"

    def __init__(self, *, vocab_size: int | None = None, freq_base: float = 10000.0,
                 **kw) -> None:
        super().__init__(**kw)
        if vocab_size is None:
            raise UserError("complex_order needs vocab_size (the number of token ids), a "
                             "positive int (a model passes its own)")
        require_positive_int("vocab_size", vocab_size)
        self.freq_base = require_float_in("freq_base", freq_base, 1.0, float("inf"))
        self.vocab_size = vocab_size
        width = self.n_heads * self.head_dim
        profile = freq_base ** (-torch.arange(width, dtype=torch.float32) / width)  # (C,)
        # raw Parameters, not nn.Embedding/nn.Linear: a model's blanket init must not redo them
        self.frequency = nn.Parameter(profile.repeat(vocab_size, 1))              # (V, C)
        self.phase = nn.Parameter(torch.rand(vocab_size, width) * 2 * math.pi)   # (V, C)
        self.proj = nn.Parameter(torch.cat((torch.eye(width), torch.zeros(width, width)),
                                           dim=1))                                # (C, 2C)

    def angles(self, x: Tensor, pos: Tensor, ids: Tensor | None) -> Tensor:
        """φ = ω_ids * pos + θ_ids in fp32. x (B, T, C), pos (T,) or (B, T), ids (B, T)
        -> (B, T, C)."""
        if ids is None:
            raise UserError("complex_order needs the token ids (embed(..., ids=ids))")
        if ids.shape != x.shape[:2]:
            raise UserError(f"ids shape {tuple(ids.shape)} != embeddings' (batch, length) "
                             f"{tuple(x.shape[:2])}")
        check_in_range(ids, 0, self.vocab_size, lambda bad: (
            f"token id {bad} is outside complex_order's tables: ids must be in "
            f"[0, {self.vocab_size}) (vocab_size={self.vocab_size})"))
        if x.shape[-1] != self.frequency.shape[-1]:
            raise UserError(f"complex_order width {self.frequency.shape[-1]} != model width "
                             f"{x.shape[-1]}")
        return (self.frequency[ids].float() * pos.to(torch.float32)[..., None]
                + self.phase[ids].float())                          # pos (T,) or (B, T)

    def complex_embedding(self, x: Tensor, pos: Tensor, ids: Tensor) -> Tensor:
        """z = x ⊙ exp(i φ), the amplitude x being the token embedding: complex (B, T, C)."""
        angle = self.angles(x, pos, ids)
        return torch.complex(x.float() * angle.cos(), x.float() * angle.sin())

    def embed(self, x: Tensor, pos: Tensor, *, ids: Tensor | None = None,
              state: dict | None = None) -> Tensor:
        angle = self.angles(x, pos, ids)                                    # (B, T, C)
        amp = x.float()
        parts = torch.cat((amp * angle.cos(), amp * angle.sin()), dim=-1)   # (B, T, 2C)
        return parts.to(x.dtype) @ self.proj.to(x.dtype).T                  # (B, T, C)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, vocab_size={self.vocab_size}"
