"""PoPE, polar coordinate position embeddings (Gopalakrishnan, Csordás, Schmidhuber and Mozer,
2025, "Decoupling the 'What' and 'Where' With Polar Coordinate Positional Embeddings",
arXiv 2509.10534).

Each of the D components c of a query or key becomes a complex number whose magnitude is the
content, ``softplus(x_c)``, and whose phase is the position, ``pos * theta_c`` with D
frequencies ``theta_c = theta^(-c/D)`` (RoPE pairs components and has D/2). Keys add a
learned phase bias ``delta_{h,c}``, clamped to [-2 pi, 0]. The score is the real part of
the complex dot product::

    q'.k' = sum_c softplus(q_c) softplus(k_c) cos((m - n) theta_c - delta_{h,c})

so it depends on the positions only through m - n, and the content (magnitudes) no longer
shifts the phase as it does in RoPE. q' and k' are the real and imaginary parts
concatenated: (B, H, L, 2D); the values keep width D and the softmax scale stays 1/sqrt(D)
(as x-transformers' ``PolarEmbedding`` and ``apply_polar_pos_emb``, the anchor of the tests).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..errors import UserError
from ..kernels.rotary import frequency_turns, rotary_angles
from .base import PositionalEncoding, register
from .checks import check_qk, require_choice, require_float_in
from .context import HookContext
from .fp32_buffers import KeepsFp32Buffers


@register("pope")
class PolarEncoding(KeepsFp32Buffers, PositionalEncoding):
    """PoPE on q and k: softplus magnitudes, phases pos * theta_c (+ a learned key bias).

    Options:
        theta: base of the D frequencies theta^(-c/D) (10000).
        bias_init: "zeros" (x-transformers' default) or "uniform" (U(-2 pi, 0)) for the
            learned phase bias of the keys, (n_heads, head_dim), clamped to [-2 pi, 0].

    q and k come out twice as wide (2 * head_dim): the KV cache keeps raw keys and encodes
    them again at every step (``cache_transformed_keys`` False).
    """

    family = "rotary"
    extrapolates = "reported better than RoPE (Gopalakrishnan et al., 2025)"
    cache_note = "exact (the cache keeps raw keys; each step re-encodes them: 2x wider q, k)"
    cache_transformed_keys = False

    def __init__(self, *, theta: float = 10000.0, bias_init: str = "zeros", **kw) -> None:
        super().__init__(**kw)
        self.theta = require_float_in("theta", theta, 1.0, float("inf"))
        self.bias_init = require_choice("bias_init", bias_init, ("zeros", "uniform"))
        d = self.head_dim
        inv_freq = 1.0 / self.theta ** (torch.arange(d, dtype=torch.float32) / d)   # (D,)
        fixed, rest = frequency_turns(inv_freq)
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self.register_buffer("turns_fixed", fixed, persistent=False)
        self.register_buffer("turns_rest", rest, persistent=False)
        #: the keys' learned phase bias delta (H, D), used clamped to [-2 pi, 0]
        self.phase_bias = nn.Parameter(torch.zeros(self.n_heads, d))
        if bias_init == "uniform":
            with torch.no_grad():
                self.phase_bias.uniform_(-2.0 * math.pi, 0.0)

    def _cos_sin(self, pos: Tensor) -> tuple[Tensor, Tensor]:
        """pos (L,) or (B, L) -> cos and sin of the phases, fp32, broadcastable to
        (B, H, L, D)."""
        angles = rotary_angles(pos, self.inv_freq, (self.turns_fixed, self.turns_rest))
        angles = angles[None, None] if pos.dim() == 1 else angles[:, None]
        return angles.cos(), angles.sin()

    @staticmethod
    def _polar(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        """x (B, H, L, D) -> (B, H, L, 2D): softplus(x) e^{i phase}, real then imaginary."""
        magnitude = F.softplus(x.float())
        return torch.cat((magnitude * cos, magnitude * sin), -1).to(x.dtype)

    def key_phase_bias(self) -> Tensor:
        """delta (1, H, 1, D), fp32, clamped to [-2 pi, 0]."""
        return self.phase_bias.float().clamp(-2.0 * math.pi, 0.0)[None, :, None, :]

    def transform_qk(self, q: Tensor, k: Tensor, at: HookContext) -> tuple[Tensor, Tensor]:
        check_qk(self, q, k, at)
        if q.shape[-1] != self.head_dim or k.shape[-1] != self.head_dim:
            raise UserError(f"q and k must have head_dim={self.head_dim} components, got "
                            f"{q.shape[-1]} and {k.shape[-1]}")
        k_cos, k_sin = self._cos_sin(at.k_pos)
        q_cos, q_sin = (k_cos, k_sin) if at.q_pos is at.k_pos else self._cos_sin(at.q_pos)
        # the keys' phases n theta + delta by the angle-sum identities: cos and sin of
        # (L, D) and (H, D) values instead of (H, L, D) (the cache re-encodes every key
        # at each decoding step)
        delta = self.key_phase_bias()
        d_cos, d_sin = delta.cos(), delta.sin()
        k_cos, k_sin = k_cos * d_cos - k_sin * d_sin, k_sin * d_cos + k_cos * d_sin
        return self._polar(q, q_cos, q_sin), self._polar(k, k_cos, k_sin)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, theta={self.theta}, bias_init={self.bias_init!r}"
