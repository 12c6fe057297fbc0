"""Which attention implementation runs a call: a pure function of what the encoding can do and
of the call's device, dtype, gradient need, lengths and options.

Implementations (``choose_backend``'s result):

- ``"sdpa"``: ``torch.nn.functional.scaled_dot_product_attention``, with an encoding's bias as a
  float mask. Every device.
- ``"fused"``: posenc's CPU attention with an additive bias and an explicit backward
  (:mod:`posenc.attention.biased`); with a value term it also hands out the weights. Chosen
  on the CPU for fp32 training without dropout outside ``torch.compile``, where it beats the
  unfused kernel SDPA falls back to for a trainable mask. Never on other devices.
- ``"flex"``: FlexAttention with the encoding's ``score_mod``: never builds the (H, n, n) bias.
  Trains on CUDA; forward-only on the CPU (torch 2.13), so there it serves evaluation.
- ``"eager"``: explicit softmax; every hook (value terms) and the attention weights.

A request of ``"sdpa"`` or ``"eager"`` may run as ``"fused"`` (the same computation), never the
other way round. Nothing here reads a tensor: the arguments are host values, so routing never
synchronises with a device and unit tests drive it with device strings.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..errors import UserError

#: what callers may request
BACKENDS = ("auto", "sdpa", "flex", "eager")
#: what may run (module docstring)
IMPLEMENTATIONS = ("sdpa", "fused", "flex", "eager")
#: ``auto`` picks flex for a biased encoding from this many keys on ...
FLEX_MIN_LEN = 2048
#: ... and this many queries: for a few queries (decoding) the bias is small, and sdpa over
#: one row of it beats a FlexAttention kernel launch
FLEX_MIN_QUERIES = 64


def flex_trains(device_type: str) -> bool:
    """Whether FlexAttention has a backward on this device type (CUDA only, torch 2.13)."""
    return device_type == "cuda"


@dataclass(frozen=True)
class RoutingFacts:
    """The host facts of one attention call that routing reads (no tensor).

    Attributes:
        requested: "auto" or a backend of the encoding's ``backends``.
        device_type: "cpu", "cuda", "mps", ... (``tensor.device.type``).
        dtype: of q, k and v.
        grad: gradients flow through this call (training).
        q_len, k_len: queries and keys.
        need_weights: the caller wants the attention weights (only eager returns them).
        dropout: attention dropout probability of this call.
        compiling: the call is being traced by torch.compile.
        sinks: the call adds learned sink logits (the fused CPU attention has none).
    """

    requested: str = "auto"
    device_type: str = "cpu"
    dtype: torch.dtype = torch.float32
    grad: bool = False
    q_len: int = 1
    k_len: int = 1
    need_weights: bool = False
    dropout: float = 0.0
    compiling: bool = False
    sinks: bool = False


def fused_fits(facts: RoutingFacts) -> bool:
    """Whether posenc's fused CPU attention serves the call: CPU, fp32, gradients needed, no
    dropout, outside torch.compile (which fuses the plain computation itself), no sinks."""
    return (facts.device_type == "cpu" and facts.dtype == torch.float32 and facts.grad
            and facts.dropout == 0.0 and not facts.compiling and not facts.sinks)


def choose_backend(backends: tuple[str, ...], has_bias: bool,
                   facts: RoutingFacts = RoutingFacts()) -> str:
    """The implementation that runs one attention call (module docstring).

    Args:
        backends: the backends the encoding computes exactly (``PositionalEncoding.backends``).
        has_bias: the encoding adds a logits term (``score_bias``).
        facts: the call's request, device type, dtype, gradient need, lengths and options.

    Raises UserError for an unknown request, a backend the encoding does not support, or flex
    with gradients where it has no backward.
    """
    requested, grad, device_type = facts.requested, facts.grad, facts.device_type
    if requested not in BACKENDS:
        raise UserError(f"unknown attention backend {requested!r}; valid: {', '.join(BACKENDS)}")
    fused = fused_fits(facts)
    value_term = backends == ("eager",)
    if facts.need_weights:
        return "eager"
    if requested != "auto":
        if requested not in backends:
            raise UserError(f"the encoding cannot run on backend {requested!r}; it supports: "
                             f"{', '.join(backends)}")
        if requested == "flex":
            if grad and not flex_trains(device_type):
                raise UserError(f"the flex backend is forward-only on {device_type}; use it "
                                 "under torch.no_grad() or pick sdpa/eager for training")
            return "flex"
        if requested == "sdpa":
            return "fused" if fused and has_bias else "sdpa"
        return "fused" if fused and value_term else "eager"
    if value_term:
        return "fused" if fused else "eager"
    if has_bias and "flex" in backends and facts.k_len >= FLEX_MIN_LEN \
            and facts.q_len >= FLEX_MIN_QUERIES and (not grad or flex_trains(device_type)):
        return "flex"
    return "fused" if fused and has_bias else "sdpa"
