"""Next-token selection shared by every generating model: greedy, or sampling with a
temperature, top-k and top-p (nucleus) filtering.

Filters are pure functions of logits (B, V) that return logits (B, V) with the tokens they
drop set to -inf; each row is filtered on its own. Ties are kept together: a filter never
keeps one of two equally likely tokens and drops the other, so what it keeps does not depend
on the order of the vocabulary.

Reference: Holtzman, Buys, Du, Forbes, Choi, "The Curious Case of Neural Text Degeneration",
ICLR 2020 (nucleus sampling).
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..encodings.checks import require_float_in
from ..errors import UserError

#: the smallest temperature that samples; below it sampling is greedy in effect and dividing
#: the logits by it overflows (use 0)
MIN_TEMPERATURE = 1e-4


def check_sampling(temperature: float = 0.0, top_k: int | None = None,
                   top_p: float | None = None) -> None:
    """UserError naming the option unless temperature is 0 or >= MIN_TEMPERATURE, top_k is
    a positive int or None and 0 < top_p <= 1 or None."""
    require_float_in("temperature", temperature, 0.0, float("inf"), low_open=False)
    if 0.0 < temperature < MIN_TEMPERATURE:
        raise UserError(f"temperature must be 0 (greedy) or at least {MIN_TEMPERATURE:g}, got "
                        f"{temperature!r}: dividing the logits by it overflows")
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int)
                              or top_k < 1):
        raise UserError(f"top_k must be a positive int or None, got {top_k!r}")
    if top_p is not None:
        require_float_in("top_p", top_p, 0.0, 1.0, high_open=False)


def broken_rows(logits: Tensor) -> Tensor:
    """Rows of logits (B, V) with a NaN or +inf, or -inf everywhere -> (B,) bool."""
    return (torch.isnan(logits).any(-1) | torch.isposinf(logits).any(-1)
            | torch.isneginf(logits).all(-1))


def logits_broken(logits: Tensor) -> Tensor:
    """Whether any row of logits (B, V) is broken (:func:`broken_rows`): a 0-dim bool tensor
    on the logits' device (reading it is the caller's choice of host sync)."""
    return broken_rows(logits).any()


def raise_broken_logits() -> None:
    """The UserError for logits :func:`logits_broken` flags."""
    raise UserError("the model's logits are not finite (nan or inf): its weights hold "
                    "non-finite values or its activations overflow in this dtype, so no "
                    "token can be chosen")


def check_logits(logits: Tensor) -> None:
    """UserError if logits (B, V) are broken (:func:`logits_broken`): there is no
    distribution to pick from (the model's weights are not finite, or its activations
    overflow in this dtype). Reads the device once."""
    if logits_broken(logits):
        raise_broken_logits()


def checks_each_token(device: torch.device, streaming: bool) -> bool:
    """Whether a decoding loop checks its logits at every token (a host read each time) or
    gathers the check on the device and reads it once at the end: each token on a CPU,
    where a read costs nothing, and when tokens are streamed to the caller, who must not get
    tokens from broken logits; at the end on an accelerator (routed by device type)."""
    return device.type == "cpu" or streaming


def _usable(logits: Tensor) -> Tensor:
    """Logits (B, V) with each broken row made uniform, so that sampling from them cannot
    fail on the device; the caller raises after the loop."""
    return torch.where(broken_rows(logits)[:, None], torch.zeros_like(logits), logits)


def top_k_filter(logits: Tensor, top_k: int) -> Tensor:
    """Keep each row's ``top_k`` largest logits (and any tied with the k-th) -> (B, V)."""
    kth = torch.topk(logits, min(top_k, logits.shape[-1]), dim=-1).values[:, -1:]  # (B, 1)
    return logits.masked_fill(logits < kth, float("-inf"))


def top_p_filter(logits: Tensor, top_p: float) -> Tensor:
    """Keep each row's nucleus: the smallest set of most probable tokens whose probability
    adds up to at least ``top_p`` (always the most probable one), plus any token tied with
    the least probable of them -> (B, V). ``top_p = 1`` keeps every token."""
    if top_p >= 1.0:
        return logits                       # a float cumsum may reach 1 before the last token
    probs = logits.float().softmax(dim=-1)                                     # (B, V)
    sorted_probs = probs.sort(dim=-1, descending=True).values                  # (B, V)
    before = sorted_probs.cumsum(dim=-1) - sorted_probs      # mass of the more probable ones
    in_nucleus = before < top_p                              # a prefix; position 0 always
    n_kept = in_nucleus.sum(dim=-1, keepdim=True)                              # (B, 1)
    threshold = sorted_probs.gather(-1, n_kept - 1)          # least probable kept, (B, 1)
    return logits.masked_fill(probs < threshold, float("-inf"))


def select_next(logits: Tensor, temperature: float = 0.0, top_k: int | None = None,
                generator: torch.Generator | None = None, *,
                top_p: float | None = None, check: bool = True) -> Tensor:
    """Pick the next token from logits (B, V) -> (B, 1) long.

    Greedy (argmax) at temperature 0, where ``top_k`` and ``top_p`` have no effect; else the
    logits are divided by the temperature, filtered by ``top_k`` and then ``top_p`` (each
    row on its own), renormalised, and one token per row is drawn with ``torch.multinomial``
    (reproducible with a seeded ``generator`` on the logits' device). ``check=False``: the
    caller checks the logits itself (:func:`logits_broken`, once after its loop); broken
    rows then pick a token that means nothing instead of raising here.
    """
    check_sampling(temperature, top_k, top_p)
    if check:
        check_logits(logits)
    elif temperature != 0.0:
        logits = _usable(logits)
    if temperature == 0.0:
        return logits.argmax(dim=-1, keepdim=True)
    logits = logits.float() / temperature
    if top_k is not None:
        logits = top_k_filter(logits, top_k)
    if top_p is not None:
        logits = top_p_filter(logits, top_p)
    return torch.multinomial(logits.softmax(dim=-1), 1, generator=generator)
