"""Position leaked through zero padding: a depthwise convolution over the input embeddings.

Islam et al. (2020, "How Much Position Information Do Convolutional Neural Networks Encode?")
found that CNNs learn absolute position from the zero padding at the borders; Su's study
notes cite it as a position encoding of its own ("CNN式"). Here the input becomes

    x + DWConv(x)            (the residual form of CPVT's positional encoding generator)

with a per-channel kernel of ``kernel_size`` taps and zero padding:

- ``padding="causal"`` (decoders): k-1 zeros on the left; position t sees x_{t-k+1..t}.
  The first k-1 positions see zeros and are thereby marked; deeper layers (and the causal
  mask) propagate that signal. With a KV cache the last k-1 inputs are kept in the cache's
  ``state`` dict, so decoding token by token equals the full pass.
- ``padding="centered"`` (encoders): (k-1)/2 zeros on each side (k odd); both ends of the
  sequence are marked. It reads future tokens, so it cannot decode token by token.

The convolution sees the window it is given: a sequence evaluated in windows (without a
cache) restarts its zero padding at every window start. Positions say where a sequence
starts, so padded and packed batches get the same borders: a tap reads the token ``j`` back
only if the current position is at least ``j`` (causal; a packed document restarts at 0, a
left-padded row's first token is at 0), and, centered, the token ``j`` away only if its
position is exactly ``j`` away (the same run of positions); other taps read zeros.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..errors import UserError
from .base import PositionalEncoding, register
from .checks import require_choice, require_int_at_least

STATE_KEY = "conv_history"


@register("conv")
class ConvEncoding(PositionalEncoding):
    """x + depthwise_conv(x) with zero padding (causal or centered).

    Options: ``kernel_size`` (>= 2, default 3; odd for centered), ``padding``
    ("causal" | "centered"), ``bias`` (False: a bias is the same at every position and adds
    no position information).
    """

    family = "absolute"
    extrapolates = "yes (marks only the sequence start; translation-equivariant elsewhere)"
    cache_note = "exact (last kernel_size-1 inputs kept with the cache)"

    def __init__(self, *, kernel_size: int = 3, padding: str = "causal", bias: bool = False,
                 **kw) -> None:
        super().__init__(**kw)
        require_int_at_least("kernel_size", kernel_size, 2)
        self.padding = require_choice("padding", padding, ("causal", "centered"))
        if padding == "centered" and kernel_size % 2 == 0:
            raise UserError(f"kernel_size must be odd (3, 5, ...) for padding='centered', "
                             f"got {kernel_size}")
        if not isinstance(bias, bool):
            raise UserError(f"bias must be True or False, got {bias!r}")
        self.kernel_size = kernel_size
        width = self.n_heads * self.head_dim
        # PyTorch's Conv1d default: uniform(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in = k
        bound = 1.0 / math.sqrt(kernel_size)
        self.weight = nn.Parameter(torch.empty(width, 1, kernel_size).uniform_(-bound, bound))
        self.bias = nn.Parameter(torch.zeros(width)) if bias else None

    def _conv(self, padded: Tensor, keep) -> Tensor:
        """Valid depthwise convolution whose tap reading ``lag`` tokens back (negative:
        ahead) is multiplied by ``keep(lag)`` ((T,) or (B, T) bool, or None for all).
        padded (B, T + k - 1, C) -> (B, T, C)."""
        k, t = self.kernel_size, padded.shape[1] - self.kernel_size + 1
        first = k - 1 if self.padding == "causal" else (k - 1) // 2      # lag of tap 0
        weight = self.weight.to(padded.dtype)[:, 0]                       # (C, k)
        out = None
        for i in range(k):
            term = padded[:, i:i + t] * weight[:, i]                     # (B, T, C)
            mask = keep(first - i)
            if mask is not None:
                term = term * mask[..., None].to(term.dtype)
            out = term if out is None else out + term
        return out if self.bias is None else out + self.bias.to(padded.dtype)

    def embed(self, x: Tensor, pos: Tensor, *, ids: Tensor | None = None,
              state: dict | None = None) -> Tensor:
        b, t, c = x.shape
        if c != self.weight.shape[0]:
            raise UserError(f"conv width {self.weight.shape[0]} != model width {c}")
        k = self.kernel_size
        if self.padding == "centered":
            if state is not None:
                raise UserError("padding='centered' reads future tokens and cannot decode "
                                 "token by token with a cache; use padding='causal'")
            half = (k - 1) // 2
            return x + self._conv(F.pad(x, (0, 0, half, half)), _same_run(pos))
        history = None if state is None else state.get(STATE_KEY)
        if history is None:
            history = x.new_zeros(b, k - 1, c)                       # causal zero padding
        elif history.shape[0] != b or history.shape[-1] != c:
            raise UserError(f"conv decode state holds batch {history.shape[0]} x width "
                             f"{history.shape[-1]}, got input batch {b} x width {c}")
        padded = torch.cat((history.to(x.dtype), x), dim=1)         # (B, k - 1 + T, C)
        if state is not None:
            state[STATE_KEY] = padded[:, -(k - 1):].detach()
        return x + self._conv(padded, lambda lag: pos >= lag if lag > 0 else None)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, kernel_size={self.kernel_size}, padding={self.padding!r}"


def _same_run(pos: Tensor):
    """keep(lag) for a centered kernel: the token ``lag`` back (negative: ahead) lies in the
    same run of positions, pos[t - lag] == pos[t] - lag (out of the window: no)."""
    def keep(lag: int) -> Tensor | None:
        if lag == 0:
            return None
        n = pos.shape[-1]
        shifted = torch.full_like(pos, -(1 << 40))                       # no position
        if lag > 0:
            shifted[..., lag:] = pos[..., :n - lag]
        else:
            shifted[..., :n + lag] = pos[..., -lag:]
        return shifted == pos - lag
    return keep

