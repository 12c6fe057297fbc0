"""Text generation from a trained run: the prompt checked against the run's tokenizer, the
length checked against what the encoding can serve, and the continuation streamed as text.

:func:`generate_text` runs :meth:`TransformerLM.generate` (KV-cached; greedy or sampled, see
:func:`posenc.models.generate.select_next`) and hands each complete piece of text to
``on_text`` as soon as its tokens are chosen (:class:`posenc.data.stream_decode.StreamDecoder`
holds a character split across tokens until it is whole). Generation stops early at the
tokenizer's end-of-document token unless ``stop_at_end`` is False.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..data.stream_decode import StreamDecoder
from ..data.tokenizer import Tokenizer
from ..encodings.checks import require_int_at_least, require_seed
from ..errors import UserError
from ..models.generate import check_sampling
from ..models.lm import TransformerLM
from .lengths import position_limit


@dataclass(frozen=True)
class Generation:
    """A prompt's token ids, the new ones, their text, and whether the end-of-document token
    ended generation before ``max_new_tokens`` (it is neither in ``new_ids`` nor in ``text``)."""

    prompt_ids: list[int]
    new_ids: list[int]
    text: str
    stopped_at_end: bool


def encode_prompt(tokenizer: Tokenizer, prompt: str) -> list[int]:
    """The prompt's token ids; UserError if it is empty or does not decode back to itself
    (a character the tokenizer cannot encode)."""
    if not isinstance(prompt, str) or not prompt:
        raise UserError("the prompt is empty; give some text to continue")
    for i, ch in enumerate(prompt):
        try:
            ch.encode("utf-8")
        except UnicodeEncodeError:
            raise UserError(f"the prompt has a character that is not valid text, {ch!r} at "
                             f"position {i}: the run's tokenizer ({tokenizer.spec}) cannot "
                             f"encode it") from None
    ids = tokenizer.encode(prompt)
    back = tokenizer.decode(ids)
    if back != prompt:
        i = next((i for i, (a, b) in enumerate(zip(prompt, back)) if a != b),
                 min(len(prompt), len(back)))
        raise UserError(f"the run's tokenizer ({tokenizer.spec}) cannot encode the prompt as "
                         f"it is: from position {i} ({prompt[i:i + 12]!r}) it decodes back as "
                         f"{back[i:i + 12]!r}")
    return ids


def servable_length(model: torch.nn.Module, upto: int) -> int:
    """The longest sequence, at most ``upto`` tokens, whose positions every encoding of
    ``model`` can serve (``upto`` unless an encoding declares a position limit below it, as a
    learned table does; :func:`posenc.eval.lengths.position_limit`)."""
    limit = position_limit(model)
    return upto if limit is None else min(upto, limit.positions)


def new_token_limit(model: TransformerLM, prompt_len: int, want: int) -> int:
    """The most new tokens, at most ``want``, that ``model`` can append to a prompt of
    ``prompt_len`` tokens (n new tokens run the model at positions 0 .. prompt_len + n - 2);
    UserError if the prompt alone is longer than the model can serve."""
    served = servable_length(model, prompt_len + max(want, 1) - 1)
    if served < prompt_len:
        raise UserError(f"the prompt has {prompt_len} tokens, more than the {served} "
                         f"positions this run's encoding {model.config.pe!r} can serve; "
                         f"give a shorter prompt")
    return min(want, served - prompt_len + 1)


def check_new_tokens(model: TransformerLM, prompt_len: int, max_new_tokens: int) -> None:
    """UserError if ``model`` cannot serve the positions of a prompt of ``prompt_len``
    tokens plus ``max_new_tokens`` new ones (it says how many new tokens would fit)."""
    require_int_at_least("max_new_tokens", max_new_tokens, 1)
    fit = new_token_limit(model, prompt_len, max_new_tokens)
    if fit < max_new_tokens:
        raise UserError(f"a prompt of {prompt_len} tokens plus {max_new_tokens} new tokens "
                         f"needs {prompt_len + max_new_tokens - 1} positions, but this run's "
                         f"encoding {model.config.pe!r} serves {prompt_len + fit - 1}; at most "
                         f"{fit} new tokens fit")


def check_finite_weights(model: torch.nn.Module) -> None:
    """UserError naming the first parameter of ``model`` that holds a NaN or an infinity
    (a broken run: its logits would be too)."""
    for name, param in model.named_parameters():
        if not torch.isfinite(param).all():
            raise UserError(f"the model's weights are broken: {name} holds non-finite values "
                            f"(nan or inf); use an earlier checkpoint or train again")


def generate_text(model: TransformerLM, tokenizer: Tokenizer, prompt: str,
                  max_new_tokens: int, *, temperature: float = 0.0, top_k: int | None = None,
                  top_p: float | None = None, seed: int | None = None,
                  stop_at_end: bool = True,
                  on_text: Callable[[str], None] | None = None) -> Generation:
    """Continue ``prompt`` by up to ``max_new_tokens`` tokens; ``on_text(piece)`` gets the
    text as it is generated (the pieces join to ``Generation.text``).

    Greedy at temperature 0, else sampled with ``top_k`` / ``top_p``; ``seed`` makes sampling
    reproducible on a given device (None: torch's global generator). All arguments are
    checked before the model runs (one-line UserError).
    """
    check_sampling(temperature, top_k, top_p)
    if seed is not None:
        require_seed("seed", seed)
    check_finite_weights(model)
    prompt_ids = encode_prompt(tokenizer, prompt)
    check_new_tokens(model, len(prompt_ids), max_new_tokens)
    device = next(model.parameters()).device
    generator = None if seed is None else torch.Generator(device=device).manual_seed(seed)
    decoder = StreamDecoder(tokenizer, prompt_ids)
    new_ids: list[int] = []
    pieces: list[str] = []

    def emit(piece: str) -> None:
        if piece:
            pieces.append(piece)
            if on_text is not None:
                on_text(piece)

    stopped = []

    def on_token(step: int, tokens: torch.Tensor) -> bool:
        token = int(tokens[0, 0])
        if stop_at_end and token == tokenizer.sep_id:       # the end of a document
            stopped.append(step)
            return True
        new_ids.append(token)
        emit(decoder.push(token))
        return False

    ids = torch.tensor([prompt_ids], device=device)
    model.generate(ids, max_new_tokens, temperature=temperature, top_k=top_k, top_p=top_p,
                   generator=generator, on_token=on_token)
    emit(decoder.finish())
    return Generation(prompt_ids, new_ids, "".join(pieces), bool(stopped))
