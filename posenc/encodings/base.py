"""The positional-encoding interface and the registration decorator (the registry's queries
and :func:`build_encoding` are in :mod:`posenc.encodings.registry`).

Every encoding is a :class:`PositionalEncoding` (an ``nn.Module``) that overrides some of
these hooks; each default does nothing. ``at`` is the call's
:class:`~posenc.encodings.context.HookContext`: q_pos (Lq,) or (B, Lq), k_pos (Lk,) or
(B, Lk), causal, consecutive, backend, axes (positions per axis), key_terms.

=================  ===========================================  ===============================
hook               called with                                  returns
=================  ===========================================  ===============================
``embed``          x (B, T, C), pos (T,) or (B, T), ids, state  x with positions mixed in
``transform_qk``   q (B, H, Lq, D), k (B, H, Lk, D), at         (q, k)
``token_terms``    x (B, T, C), the attention's input           (B, H, T, K) per token, or None
``score_bias``     q, k, at                                     (B|1, H, Lq, Lk) term or None
``fused_bias``     q, k, at                                     score_bias as FusedBias or None
``score_mod``      q, k, at                                     FlexAttention score_mod or None
``value_term``     weights (B, H, Lq, Lk), at                   (B, H, Lq, D) added, or None
``attn_scale``     at                                           (Lq,) or (B, Lq) multiplier
``sm_scale``       (nothing)                                    softmax temperature (float)
``carry_keys``     k (B, H, Lk, D) after a cached call, at          the keys the cache keeps
=================  ===========================================  ===============================

Positions are integer tensors passed explicitly (never inferred from shapes), so KV caches,
offsets and packed batches work alike for every encoding. ``score_bias`` and ``score_mod``
describe the same additive term, added to the already scaled logits ``q.k * sm_scale``. To call
a hook from your own attention: ``pe.score_bias(q, k, HookContext.for_positions(pos, pos,
causal=True))``.

What attention tells the hooks in ``at``, as host values (a hook never reads a tensor to learn
them, so the hot path never synchronises with a device):

- ``causal``: each query sees the keys up to itself only. Queries are the last Lq of the Lk
  keys (a KV cache holds the earlier ones), and positions never decrease along the visible
  keys, so a pair with k_pos > q_pos is never visible. A bias may hold any finite value at
  hidden pairs (the attention masks them and passes them no gradient), which lets relative
  tables skip negative distances.
- ``consecutive``: q_pos and k_pos are each a run p0, p0 + 1, ... (the model built them so).
  Relative encodings then read per-distance tables through strided views instead of gathers.
  False promises nothing; every hook is exact either way.
- ``backend``: the attention implementation that will consume q and k ("sdpa", "fused",
  "flex", "eager"; None when unknown), for an encoding whose cheapest exact form depends on it.

and one tensor, ``key_terms``: for an encoding that reads the attention's input
(``token_terms``: a forget gate per token), what it read at every key (B, H, Lk, K), cached
keys first (the queries of a self-attention call are the last Lq keys). Self-attention
computes the terms of its new tokens once per call and keeps them with the KV cache; None
elsewhere (cross-attention, a hook called without them). To call such a hook yourself:
``HookContext.for_positions(pos, pos, causal=True, key_terms=pe.token_terms(x))``.

Attention never asks for an encoding's name: it reads the capabilities below, which are
derived from which hooks a class overrides.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import ClassVar, Protocol

import torch
from torch import Tensor, nn

from ..errors import UserError
from .checks import require_float_in, require_int_at_least, require_positive_int
from .context import HookContext
from .limits import PositionLimit

ScoreMod = Callable[[Tensor, Tensor, Tensor, Tensor, Tensor], Tensor]


class FusedBias(Protocol):
    """A causal square block's (B, H, L, L) bias that writes itself into blocks of attention
    logits instead of being a tensor (``fused_bias``; fused attention,
    posenc.attention.biased, consumes it). Implementations:
    posenc.kernels.layouts.clipped_pairs.ClippedPairBias and
    posenc.kernels.layouts.causal_pairs.CausalPairBias."""

    shape: tuple[int, int, int, int]
    inputs: tuple[Tensor, ...]       # the tensors its gradients flow to

    def write(self, out: Tensor, first_row: int) -> None:
        """out (B, H, rows, keys), row-contiguous <- the bias at rows first_row.. and keys
        0..keys-1, -inf at the hidden pairs j > i."""

    def grads(self, blocks: list[tuple[int, Tensor]]) -> tuple[Tensor, ...]:
        """Gradients of ``inputs`` from the bias gradient in row blocks [(first row, (B, H,
        rows, keys))] covering every row in order, each with the keys its rows see."""

_REGISTRY: dict[str, type[PositionalEncoding]] = {}


class PositionalEncoding(nn.Module):
    """Base class: every hook defaults to "does nothing".

    Class attributes describe the encoding for ``posenc list``:
    ``family`` ("none", "absolute", "rotary", "bias", "relative"), ``extrapolates`` (a short
    verdict) and ``cache_note`` (how the KV cache treats it). An encoding whose positions
    stop somewhere declares where in ``position_limit`` (callers read it, never catch errors).

    Args:
        n_heads: attention heads H.
        head_dim: per-head width D.
        max_len: the longest position the encoding must serve (None: unbounded if possible).
        logn_base_len: if set, logits are multiplied by ``log(n) / log(logn_base_len)`` where
            ``n`` (the number of keys a query sees) exceeds ``logn_base_len``.
        temperature_floor: if set, Llama 4's attention temperature tuning (transformers'
            ``Llama4TextAttention``, after Nakanishi, 2025, "Scalable-Softmax Is Superior for
            Attention", arXiv 2501.19399; this is its ``floor_scale``, 8192): logits of a
            query at position p are multiplied by ``1 + temperature_scale * log(1 + floor((p +
            1) / temperature_floor))`` (after log-n scaling, if both are set).
        temperature_scale: the ``attn_scale`` of that formula, >= 0 (default 0.1, as Llama 4);
            only with ``temperature_floor``.
    """

    name: ClassVar[str] = ""
    family: ClassVar[str] = "none"
    extrapolates: ClassVar[str] = "n/a"
    cache_note: ClassVar[str] = "exact"
    #: keys may be cached after ``transform_qk``; False when the transform of a key depends
    #: on the total length (dynamic NTK), so the cache keeps raw keys and re-applies it.
    cache_transformed_keys: ClassVar[bool] = True
    #: each attention layer gets its own instance (per-layer parameters).
    per_layer: ClassVar[bool] = False
    #: the transform depends on the sequence length, not only on positions (dynamic NTK,
    #: LongRoPE): see ``length_signature``
    length_dependent: bool = False
    #: every term reads positions only through the distances k_pos - q_pos (see
    #: ``translation_invariant``)
    distance_only: ClassVar[bool] = False
    #: how many position axes the encoding reads (M-RoPE: 3, axial RoPE: 2); a model then
    #: accepts positions (A, T) or (A, B, T) and hands them to the hooks as ``at.axes``
    position_axes: ClassVar[int] = 1
    #: no term reads a position at all: the order of the keys is the context (CoPE, the
    #: forget gate), so any positions give the same result
    position_free: ClassVar[bool] = False
    #: the registered encoding this one equals exactly on text (one position axis), and why
    #: ("" where none): the lab's report explains identical numbers with it
    equals_on_text: ClassVar[str] = ""
    equals_on_text_because: ClassVar[str] = ""

    def __init__(self, *, n_heads: int, head_dim: int, max_len: int | None = None,
                 logn_base_len: int | None = None, temperature_floor: int | None = None,
                 temperature_scale: float | None = None) -> None:
        super().__init__()
        require_positive_int("n_heads", n_heads)
        require_positive_int("head_dim", head_dim)
        if max_len is not None:
            require_positive_int("max_len", max_len)
        if logn_base_len is not None:
            require_int_at_least("logn_base_len", logn_base_len, 2)
        self.n_heads = n_heads
        self.head_dim = head_dim
        self.max_len = max_len
        self.logn_base_len = logn_base_len
        if temperature_floor is not None:
            require_positive_int("temperature_floor", temperature_floor)
            temperature_scale = 0.1 if temperature_scale is None else require_float_in(
                "temperature_scale", temperature_scale, 0.0, float("inf"), low_open=False)
        elif temperature_scale is not None:
            raise UserError("temperature_scale needs temperature_floor (Llama 4's floor_scale, "
                            "a positive integer such as 8192)")
        self.temperature_floor = temperature_floor
        self.temperature_scale = temperature_scale

    @property
    def position_limit(self) -> PositionLimit | None:
        """The largest position this encoding serves and what ends there, or None when it
        serves any position >= 0. Its hooks refuse exactly the positions past it."""
        return None

    @property
    def max_position(self) -> int | None:
        """The largest position this encoding serves (None: no bound)."""
        limit = self.position_limit
        return None if limit is None else limit.max_position

    @property
    def translation_invariant(self) -> bool:
        """Whether adding one constant to every position of a sequence changes no term: a
        ``distance_only`` class without log-n scaling (whose factor reads the query's own
        position). A model may then hand such an encoding the run 0..T-1 in place of
        per-sequence positions whose distances it equals at every visible pair. A
        ``position_free`` class is, trivially."""
        return (self.distance_only or self.position_free) and self.logn_base_len is None \
            and self.temperature_floor is None

    # ----------------------------------------------------------------- hooks
    def embed(self, x: Tensor, pos: Tensor, *, ids: Tensor | None = None,
              state: dict | None = None) -> Tensor:
        """Mix absolute positions into token embeddings. x: (B, T, C), pos: (T,).

        ``ids`` (B, T) are the token ids (for word-dependent encodings); ``state`` is a dict
        that lives as long as a KV cache, for encodings that need earlier inputs when
        decoding (None without a cache).
        """
        return x

    def transform_qk(self, q: Tensor, k: Tensor, at: HookContext) -> tuple[Tensor, Tensor]:
        """Transform queries (B, H, Lq, D) and keys (B, H, Lk, D) by their positions
        ``at.q_pos`` and ``at.k_pos`` (``at.backend``, ``at.consecutive``: module docstring)."""
        return q, k

    def token_terms(self, x: Tensor) -> Tensor | None:
        """Per-token values read from the self-attention's input x (B, T, C) (C = H * D) of
        the tokens whose keys a call adds: (B, H, T, K) or None (the default: the encoding
        reads no input). Each token's terms depend on that token only; attention keeps them
        with the KV cache and hands those of every key to the other hooks as
        ``at.key_terms``."""
        return None

    def score_bias(self, q: Tensor, k: Tensor, at: HookContext) -> Tensor | None:
        """Additive logits term broadcastable to (B, H, Lq, Lk), or None; float32 for the
        distance biases whatever q's dtype (cast it before handing it to SDPA).

        ``at.causal``, ``at.consecutive``: what attention promises about the pairs (module
        docstring); under ``causal`` the term may hold any finite value at hidden pairs. A
        bias built in its causal form (``bidirectional=False``) refuses ``causal=False``.
        """
        return None

    def fused_bias(self, q: Tensor, k: Tensor, at: HookContext) -> FusedBias | None:
        """The ``score_bias`` term of a causal square block as a :class:`FusedBias`, which
        fused attention writes straight into its logits blocks, or None (then ``score_bias``).
        Optional, for speed: a (B, H, Lq, Lk) tensor the encoding never builds."""
        return None

    def score_mod(self, q: Tensor, k: Tensor, at: HookContext) -> ScoreMod | None:
        """The ``score_bias`` term as a FlexAttention ``score_mod(score, b, h, qi, ki)``.

        ``qi`` and ``ki`` index into ``at.q_pos`` and ``at.k_pos``. None when the encoding
        cannot express its term this way (then flex is not offered).
        """
        return None

    def value_term(self, weights: Tensor, at: HookContext) -> Tensor | None:
        """Positional term added to the attention output: (B, H, Lq, D) or None. With
        ``at.causal`` the weights are zero at hidden pairs."""
        return None

    def sm_scale(self) -> float:
        """Softmax temperature applied to q.k (default 1/sqrt(D))."""
        return 1.0 / math.sqrt(self.head_dim)

    def attn_scale(self, at: HookContext) -> Tensor | None:
        """Per-query logits multiplier (Lq,) or (B, Lq) (the shape of ``at.q_pos``; (B, Lq)
        when ``at.k_pos`` is per sequence), or None. Implements log-n scaling and
        temperature tuning.

        A causal query at position p sees ``p + 1`` keys, so its factor depends on ``p`` only
        and cached decoding equals a full forward pass; a bidirectional query sees all Lk keys
        (per sequence: the span of its key positions, which counts its real tokens when
        padding repeats an edge position). Temperature tuning (``temperature_floor``) reads
        the query's own position, causal or not, and multiplies the log-n factor.
        """
        logn = self._logn_scale(at)
        if self.temperature_floor is None:
            return logn
        steps = torch.floor((at.q_pos.to(torch.float32) + 1.0) / self.temperature_floor)
        tuned = 1.0 + self.temperature_scale * torch.log1p(steps)
        return tuned if logn is None else logn * tuned

    def _logn_scale(self, at: HookContext) -> Tensor | None:
        """The log-n factor of ``attn_scale`` (None without ``logn_base_len``)."""
        if self.logn_base_len is None:
            return None
        q_pos, k_pos = at.q_pos, at.k_pos
        if at.causal:
            n = (q_pos.to(torch.float32) + 1.0)
        elif k_pos.dim() == 2:                  # per sequence: the span of its positions
            span = (k_pos.amax(-1) - k_pos.amin(-1) + 1).to(torch.float32)       # (B,)
            n = span[:, None].expand(k_pos.shape[0], q_pos.shape[-1])
        else:
            n = torch.full(q_pos.shape, float(k_pos.shape[-1]), dtype=torch.float32,
                           device=q_pos.device)
        return (torch.log(n) / math.log(self.logn_base_len)).clamp(min=1.0)

    def carry_keys(self, k: Tensor, at: HookContext) -> Tensor:
        """The keys (B, H, Lk, D) a KV cache keeps once this self-attention call is done (the
        next call's cached keys), from the call's keys k (cached keys first, the queries are
        the last Lq keys) and ``at``: by default k itself. An encoding whose transform of a
        key depends on the tokens after it (PaTH) moves them past this call's tokens;
        attention stores what it returns in the cache."""
        return k

    def length_signature(self, seq_len: int) -> object | None:
        """What the transform depends on besides positions, for ``seq_len`` positions.

        None (the default) when nothing. Length-dependent encodings (``length_dependent``:
        dynamic NTK, LongRoPE) return a comparable value; when it changes while decoding, the
        hidden states cached for earlier tokens are stale and a model recomputes them.
        """
        return None

    # ---------------------------------------------------------- capabilities
    @classmethod
    def overrides(cls, hook: str) -> bool:
        """True if the class implements ``hook`` itself."""
        return getattr(cls, hook) is not getattr(PositionalEncoding, hook)

    @classmethod
    def hook_kinds(cls) -> list[str]:
        """Names of the hooks this encoding implements (``attn_scale`` always: log-n)."""
        hooks = ["embed", "transform_qk", "token_terms", "score_bias", "score_mod",
                 "value_term", "carry_keys"]
        return [h for h in hooks if cls.overrides(h)]

    @property
    def has_bias(self) -> bool:
        return type(self).overrides("score_bias")

    @classmethod
    def backends(cls) -> tuple[str, ...]:
        """Attention backends able to compute this encoding exactly."""
        if cls.overrides("value_term"):
            return ("eager",)
        if cls.overrides("score_bias") and not cls.overrides("score_mod"):
            return ("sdpa", "eager")
        return ("sdpa", "flex", "eager")

    def extra_repr(self) -> str:
        return f"n_heads={self.n_heads}, head_dim={self.head_dim}, max_len={self.max_len}"


# ------------------------------------------------------------------ registry
def register(name: str) -> Callable[[type[PositionalEncoding]], type[PositionalEncoding]]:
    """Class decorator: make an encoding available to
    :func:`~posenc.encodings.registry.build_encoding` as ``name``."""

    def wrap(cls: type[PositionalEncoding]) -> type[PositionalEncoding]:
        if name in _REGISTRY:
            raise UserError(f"encoding {name!r} is already registered")
        cls.name = name
        _REGISTRY[name] = cls
        return cls

    return wrap


# ------------------------------------------------- per-sample position helpers
def position_reader(pos: Tensor) -> Callable[[Tensor, Tensor], Tensor]:
    """A function (b, idx) -> the position of token idx of sequence b, for a score_mod:
    pos (L,) shared by the batch, or (B, L) per sequence (decided here, once)."""
    if pos.dim() == 2:
        return lambda b, idx: pos[b, idx]
    return lambda b, idx: pos[idx]


def pairs_per_head(pairs: Tensor) -> Tensor:
    """A per-pair tensor (Lq, Lk), or (B, Lq, Lk) for positions per sequence, as
    (1 or B, 1, Lq, Lk): it broadcasts against per-head tensors (B, H, Lq, Lk)."""
    return pairs[None, None] if pairs.dim() == 2 else pairs[:, None]


def heads_first(rows: Tensor, n_heads: int) -> Tensor:
    """Per-position vectors in head space (..., L, H * D) -> (..., H, L, D): (H, L, D) for
    shared positions, (B, H, L, D) per sequence (both broadcast against (B, H, L, D))."""
    return rows.unflatten(-1, (n_heads, -1)).transpose(-3, -2)
