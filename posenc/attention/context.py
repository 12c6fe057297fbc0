"""What attention needs for one forward (:class:`AttentionContext`, built by the model) and
for one attention call (:class:`AttentionCall`, derived by a layer).

A model builds and validates one :class:`AttentionContext` per forward and hands it to every
block; a layer adds what is its own (its KV cache, its dropout, the implementation routing
chose for it) and calls :func:`~posenc.attention.backends.attend` with an
:class:`AttentionCall`, whose :class:`~posenc.encodings.context.HookContext` is what the
encoding's hooks read.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from ..encodings.checks import check_axis_positions, check_positions
from ..encodings.context import HookContext
from ..errors import UserError
from .masks import Masks
from .routing import BACKENDS


def _check_mask(name: str, mask: Tensor | None, pos: Tensor) -> None:
    """A (B, T) mask whose length is that of the positions ``pos`` (T,) or (B, T)."""
    if mask is None:
        return
    if not isinstance(mask, Tensor) or mask.dim() != 2 or mask.shape[1] != pos.shape[-1] or \
            (pos.dim() == 2 and mask.shape[0] != pos.shape[0]):
        got = tuple(mask.shape) if isinstance(mask, Tensor) else type(mask).__name__
        raise UserError(f"{name} must be (batch, {pos.shape[-1]}), one entry per position, "
                        f"got {got}")


@dataclass(frozen=True)
class AttentionContext:
    """What every attention layer of one forward needs; validated once, when built.

    Attributes:
        pos: integer positions of this forward's tokens (T,) or (B, T): the queries, and the
            keys they add (after a KV cache's).
        causal: each query sees the keys up to itself only.
        consecutive: ``pos`` is one run p0, p0 + 1, ... continuing the caches (the layout
            hint the hooks receive); False promises nothing.
        key_valid: (B, T) bool, False for padding tokens (no query sees them), or None.
        documents: (B, T) ids of the documents packed into each row (no cache), or None.
        backend: the requested backend ("auto", "sdpa", "flex", "eager").
        need_weights: self-attention layers return their weights (B, H, T, Lk).
        memory: for cross-attention, the (B, S, C) states its keys and values come from.
        memory_pos: the memory's integer positions (S,) or (B, S).
        memory_valid: (B, S) bool, the memory's padding, or None.
        axes: positions along each axis (A, T) or (A, B, T) for an encoding with
            ``position_axes`` A > 1 (the hooks get them when the keys are these tokens), or
            None; ``pos`` then stays the positions masks and caches count.
        window_pos: the positions attention windows count ((T,) or (B, T)) when ``pos`` is
            not them (a model may hand translation-invariant encodings the run 0..T-1 in
            place of each row's positions), else None: windows count ``pos``.
    """

    pos: Tensor
    causal: bool
    consecutive: bool = False
    key_valid: Tensor | None = None
    documents: Tensor | None = None
    backend: str = "auto"
    need_weights: bool = False
    memory: Tensor | None = None
    memory_pos: Tensor | None = None
    memory_valid: Tensor | None = None
    axes: Tensor | None = None
    window_pos: Tensor | None = None

    def __post_init__(self) -> None:
        check_positions("positions", self.pos, None)
        if self.axes is not None:
            check_axis_positions("axes", self.axes, len(self.axes), self.pos.shape[-1],
                                 self.pos.shape[0] if self.pos.dim() == 2 else None)
        if self.window_pos is not None:
            check_positions("window_pos", self.window_pos, self.pos.shape[-1])
        for name in ("causal", "consecutive", "need_weights"):
            if not isinstance(getattr(self, name), bool):
                raise UserError(f"{name} must be True or False, got {getattr(self, name)!r}")
        if self.backend not in BACKENDS:
            raise UserError(f"unknown attention backend {self.backend!r}; valid: "
                            f"{', '.join(BACKENDS)}")
        _check_mask("key_valid", self.key_valid, self.pos)
        _check_mask("documents", self.documents, self.pos)
        if self.memory is None:
            if self.memory_pos is not None or self.memory_valid is not None:
                raise UserError("memory_pos and memory_valid need the memory they describe")
            return
        if not isinstance(self.memory, Tensor) or self.memory.dim() != 3:
            got = tuple(self.memory.shape) if isinstance(self.memory, Tensor) else \
                type(self.memory).__name__
            raise UserError(f"memory must be (batch, source length, d_model), got {got}")
        check_positions("memory_pos", self.memory_pos, self.memory.shape[1],
                        self.memory.shape[0])
        _check_mask("memory_valid", self.memory_valid, self.memory_pos)

    def hook_context(self, k_pos: Tensor, consecutive: bool, backend: str | None
                     ) -> HookContext:
        """What the hooks see for keys at ``k_pos``, with the layer's layout hint and
        implementation."""
        axes = self.axes if k_pos is self.pos else None
        return HookContext(self.pos, k_pos, self.causal, consecutive, backend, axes)


@dataclass(frozen=True)
class AttentionCall:
    """One attention call's options besides q, k, v and the encoding.

    Attributes:
        at: the hook context (positions, causal, layout hint; ``at.backend`` is the
            implementation when routing already chose it, else None).
        backend: the requested backend, routed when ``at.backend`` is None.
        need_weights: return the weights (B, H, Lq, Lk) (eager).
        dropout: attention dropout probability of this call.
        masks: padding, document and window masks, or None.
        sinks: (H,) learned sink logits (a virtual key with a zero value that joins every
            query's softmax denominator, as gpt-oss), or None.
    """

    at: HookContext
    backend: str = "auto"
    need_weights: bool = False
    dropout: float = 0.0
    masks: Masks | None = None
    sinks: Tensor | None = None

    @classmethod
    def for_positions(cls, q_pos: Tensor, k_pos: Tensor, *, causal: bool = False,
                      consecutive: bool = False, **options) -> AttentionCall:
        """A call over checked positions (:meth:`HookContext.for_positions`); ``options``
        are the other fields (backend, need_weights, dropout, masks)."""
        at = HookContext.for_positions(q_pos, k_pos, causal=causal, consecutive=consecutive)
        return cls(at, **options)

    @property
    def causal(self) -> bool:
        return self.at.causal

    def active_masks(self) -> Masks | None:
        """The masks if any hides a pair, else None."""
        return self.masks if self.masks is not None and self.masks.any() else None

    def routed(self, implementation: str) -> AttentionCall:
        """The same call, with ``implementation`` told to the hooks."""
        return AttentionCall(self.at.with_backend(implementation), self.backend,
                             self.need_weights, self.dropout, self.masks, self.sinks)
