"""Rotary position embedding (Su et al., 2021) with every Hugging Face frequency scaling.

Pairs of dimensions of q and k are rotated by the angle ``pos * inv_freq[i]``, so
``<R_m q, R_n k> = <q, R_{n-m} k>`` depends only on n - m, and norms are preserved.

Layouts: ``"half"`` pairs dimension i with i + d/2 (Hugging Face, GPT-NeoX), ``"interleaved"``
pairs 2i with 2i+1 (Meta's Llama release, RoFormer). Angles and cos/sin are fp32 whatever the
model dtype. Angles are the fp32 product pos * inv_freq below position 2^16 (as Hugging Face
computes them) and, for integer positions from there on, exact products of the fp32
frequencies reduced modulo 2 pi (about 1e-6 rad below 2^31). Scalings come from
:mod:`posenc.encodings.rope_scaling` (one module applies any).

p-RoPE (Barbero, Vitvitskyi, Perivolaropoulos, Pascanu and Veličković, 2024, "Round and
Round We Go! What makes Rotary Positional Encodings useful?", arXiv 2410.06205, ICLR 2025;
their ``apply_p_rope`` and Table 2) is the option ``partial=p``: it keeps the
``floor(p * R / 2)`` highest frequencies of the R rotated dimensions, unchanged, and sets the
lowest ones to zero, so those pairs are never rotated (semantic channels); p = 1 is RoPE. It
is an option rather than an encoding of its own because it is RoPE with a frequency mask:
every layout, scaling, cache rule and oracle of RoPE carries over. Unlike ``rotary_dim``, which recomputes the
frequencies over fewer dimensions (theta^(-2i/R')), it keeps RoPE's own frequencies
(transformers' "proportional" RoPE of Gemma 4 with ``partial_rotary_factor``).
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import Tensor

from ..errors import UserError
from ..kernels.rotary import apply_rotary, frequency_turns, rotary_angles
from .base import PositionalEncoding, register
from .checks import check_qk, require_choice, require_float_in
from .context import HookContext
from .fp32_buffers import KeepsFp32Buffers
from .rope_scaling import (
    LENGTH_DEPENDENT,
    REQUIRED,
    compute_inv_freq,
    frequency_key,
    scaling_type,
    validate_scaling,
)


@register("rope")
class RotaryEncoding(KeepsFp32Buffers, PositionalEncoding):
    """RoPE on q and k; optional partial rotary and any frequency scaling.

    Options:
        theta: base (10000).
        layout: "half" | "interleaved".
        rotary_dim: rotated dims (even, <= head_dim); default all of head_dim.
        scaling: a Hugging Face ``rope_scaling`` dict (linear, ntk, dynamic, yarn, llama3,
            longrope). ``original_max_position_embeddings`` defaults to ``max_len`` where the
            type needs it.
        partial: p-RoPE's fraction p in (0, 1] of the frequencies kept (the highest
            ``floor(p * rotary_dim / 2)``; the others are zero: those pairs are not rotated).
    """

    FP32_BUFFERS = ("inv_freq", "turns_rest", "inv_freq_long", "turns_rest_long")
    #: whether the encoding takes a scaling whose frequencies follow the sequence length
    #: (dynamic NTK, LongRoPE); callers ask this instead of trying and catching a refusal
    length_dependent_scalings: ClassVar[bool] = True

    family = "rotary"
    extrapolates = "poorly (better with scaling)"
    cache_note = "exact (length-dependent scalings recompute the cache when frequencies change)"

    def __init__(self, *, theta: float = 10000.0, layout: str = "half",
                 rotary_dim: int | None = None, scaling: dict[str, Any] | None = None,
                 partial: float = 1.0, **kw) -> None:
        super().__init__(**kw)
        self.theta = require_float_in("theta", theta, 1.0, float("inf"))
        self.layout = require_choice("layout", layout, ("half", "interleaved"))
        if self.head_dim % 2:
            raise UserError(f"rope needs an even head_dim, got head_dim={self.head_dim}")
        rotary_dim = self.head_dim if rotary_dim is None else rotary_dim
        if isinstance(rotary_dim, bool) or not isinstance(rotary_dim, int) \
                or not 2 <= rotary_dim <= self.head_dim or rotary_dim % 2:
            raise UserError(f"rotary_dim must be an even integer in [2, head_dim={self.head_dim}]"
                             f", got {rotary_dim!r}")
        self.rotary_dim = rotary_dim
        self.partial = require_float_in("partial", partial, 0.0, 1.0, high_open=False)
        #: p-RoPE: the number of frequencies kept (the highest), the rest are zero
        self.kept_pairs = int(self.partial * rotary_dim // 2)
        if self.kept_pairs < 1:
            raise UserError(f"partial={partial!r} keeps no frequency of rotary_dim="
                            f"{rotary_dim}: partial * rotary_dim / 2 must be >= 1")
        kind = scaling_type(scaling)
        if scaling is not None and "original_max_position_embeddings" in REQUIRED[kind] \
                and scaling.get("original_max_position_embeddings") is None:
            if self.max_len is None:
                raise UserError(f"scaling {kind!r} needs 'original_max_position_embeddings' "
                                 "(or max_len to default it), a positive int")
            scaling = {**scaling, "original_max_position_embeddings": self.max_len}
        self.scaling = validate_scaling(scaling, rotary_dim=rotary_dim)
        self.length_dependent = kind in LENGTH_DEPENDENT
        self.cache_transformed_keys = not self.length_dependent
        inv_freq, factor = self._inv_freq()
        self._frequency_buffers("", inv_freq)
        self.attention_factor = factor
        self._frequency_memo: dict = {}
        #: longrope switches to its long factors once a sequence is longer than this: both
        #: sets are kept and chosen on the device (no host read); dynamic NTK computes its
        #: frequencies on the host from the sequence length
        self.switch_at = self.scaling["original_max_position_embeddings"] \
            if kind == "longrope" else None
        if self.switch_at is not None:
            self._frequency_buffers("_long", self._inv_freq(self.switch_at + 1)[0])

    def _inv_freq(self, seq_len: int | None = None) -> tuple[Tensor, float]:
        """(inv_freq (R/2,) fp32, attention factor) of the scaling at ``seq_len``, with the
        frequencies p-RoPE drops set to zero."""
        inv_freq, factor = compute_inv_freq(self.rotary_dim, self.theta, self.scaling, seq_len)
        if self.kept_pairs < inv_freq.shape[0]:
            inv_freq = inv_freq.clone()
            inv_freq[self.kept_pairs:] = 0.0
        return inv_freq, factor

    def _frequency_buffers(self, suffix: str, inv_freq: Tensor) -> None:
        """inv_freq (R/2,) fp32 and its split into turns (``frequency_turns``, float64 on
        the CPU) as buffers named inv_freq<suffix>, turns_fixed<suffix>, turns_rest<suffix>."""
        fixed, rest = frequency_turns(inv_freq)
        self.register_buffer("inv_freq" + suffix, inv_freq, persistent=False)   # fp32
        self.register_buffer("turns_fixed" + suffix, fixed, persistent=False)   # int64
        self.register_buffer("turns_rest" + suffix, rest, persistent=False)     # fp32

    def _dynamic_frequencies(self, seq_len: int, device) -> tuple[Tensor, float, tuple]:
        """(inv_freq, attention factor, frequency_turns) of dynamic NTK at ``seq_len``, kept
        for the last few lengths that fix them (``frequency_key``): decoding under the
        stepped schedule computes them once per threshold, not once per token."""
        key = (frequency_key(self.scaling, seq_len), str(device))
        found = self._frequency_memo.get(key)
        if found is None:
            inv_freq, factor = self._inv_freq(seq_len)
            inv_freq = inv_freq.to(device)
            found = (inv_freq, factor, frequency_turns(inv_freq))
            if len(self._frequency_memo) >= 8:
                self._frequency_memo.pop(next(iter(self._frequency_memo)))
            self._frequency_memo[key] = found
        return found

    def frequencies(self, seq_len: int) -> tuple[Tensor, float]:
        """(inv_freq, attention_factor) in force for a sequence of ``seq_len`` positions."""
        if not self.length_dependent:
            return self.inv_freq, self.attention_factor
        inv_freq, factor = self._inv_freq(seq_len)
        return inv_freq.to(self.inv_freq.device), factor

    def length_signature(self, seq_len: int) -> object | None:
        """What fixes the frequencies at ``seq_len`` (a host value, see
        ``rope_scaling.frequency_key``); None unless the scaling depends on length."""
        return frequency_key(self.scaling, seq_len) if self.length_dependent else None

    def cos_sin(self, pos: Tensor, seq_len: int, long: Tensor | None = None
                ) -> tuple[Tensor, Tensor]:
        """cos and sin (times the attention factor) at positions pos: (L, R/2) fp32 each.

        ``seq_len``: the sequence length (dynamic NTK); ``long``: a 0-d bool tensor, True
        where longrope's long factors apply. Angles stay accurate far past 2^16 positions
        (see ``rotary_angles``)."""
        inv_freq, factor = self.inv_freq, self.attention_factor
        turns = (self.turns_fixed, self.turns_rest)
        if self.switch_at is not None:        # both sets on the device, chosen there
            if long is None:
                long = torch.tensor(seq_len > self.switch_at, device=pos.device)
            inv_freq = torch.where(long, self.inv_freq_long, inv_freq)
            turns = (torch.where(long, self.turns_fixed_long, turns[0]),
                     torch.where(long, self.turns_rest_long, turns[1]))
        elif self.length_dependent:           # frequencies and their split on the host
            inv_freq, factor, turns = self._dynamic_frequencies(seq_len, pos.device)
        angles = rotary_angles(pos, inv_freq, turns)
        if factor == 1.0:
            return angles.cos(), angles.sin()
        return angles.cos() * factor, angles.sin() * factor

    def sequence_length(self, q_pos: Tensor, k_pos: Tensor) -> tuple[int, Tensor | None]:
        """What the frequencies depend on: (1 + the largest position, read on the host, for
        dynamic NTK, else 0) and (a 0-d bool tensor, True when longrope's long factors
        apply, else None). Other scalings never read a position's value."""
        if self.switch_at is not None:
            return 0, torch.maximum(q_pos.max(), k_pos.max()) >= self.switch_at
        if not self.length_dependent:
            return 0, None
        return 1 + int(torch.maximum(q_pos.max(), k_pos.max())), None

    def transform_qk(self, q: Tensor, k: Tensor, at: HookContext) -> tuple[Tensor, Tensor]:
        q_pos, k_pos = at.q_pos, at.k_pos
        check_qk(self, q, k, at)        # float q/k: integer ones would truncate
        seq_len, long = self.sequence_length(q_pos, k_pos)
        k_cos, k_sin = self.cos_sin(k_pos, seq_len, long)
        if q_pos is k_pos:                        # self-attention over the same positions
            q_cos, q_sin = k_cos, k_sin
        else:
            q_cos, q_sin = self.cos_sin(q_pos, seq_len, long)
        return (apply_rotary(q, q_cos, q_sin, self.layout),
                apply_rotary(k, k_cos, k_sin, self.layout))

    def extra_repr(self) -> str:
        return (f"{super().extra_repr()}, theta={self.theta}, layout={self.layout!r}, "
                f"rotary_dim={self.rotary_dim}, scaling={self.scaling}, partial={self.partial}")

