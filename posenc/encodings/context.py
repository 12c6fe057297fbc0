"""What attention tells an encoding's hooks about one call: :class:`HookContext`.

It is defined here, below attention, so that an encoding never imports attention: attention
builds one per call (posenc.attention.context derives it from the model's context) and every
hook reads what it needs from it. Users calling hooks from their own attention build one with
:meth:`HookContext.for_positions`, which checks its arguments.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from torch import Tensor

from ..errors import UserError
from ..kernels.layouts.relative_shift import PairLayout, layout_kind, pair_layout
from .checks import check_axis_positions, check_positions

#: the attention implementations a hook may be told about (posenc.attention.routing)
HOOK_BACKENDS = ("sdpa", "fused", "flex", "eager")


@dataclass(frozen=True)
class HookContext:
    """Positions and host facts of one attention call, as the hooks see them.

    Attributes:
        q_pos: integer positions of the queries, (Lq,) shared by the batch or (B, Lq).
        k_pos: integer positions of the keys, (Lk,) or (B, Lk).
        causal: each query sees the keys up to itself only (the queries are the last Lq
            keys); a term may then hold any finite value at hidden pairs.
        consecutive: q_pos and k_pos are each a run p0, p0 + 1, ... (relative tables may be
            read through strided views); False promises nothing.
        backend: the implementation that will consume q and k ("sdpa", "fused", "flex",
            "eager"), or None when unknown.
        axes: for an encoding with ``position_axes`` A > 1 (M-RoPE, axial RoPE), the
            queries' positions along each axis, (A, Lq) or (A, B, Lq), or None (then the
            encoding derives them from q_pos). Given only when the keys are the queries'
            own tokens (k_pos is q_pos).
        key_terms: (B, H, Lk, K), what the encoding's ``token_terms`` read from the
            attention's input at every key (cached keys first; the queries are the last Lq
            keys), or None: self-attention fills it for an encoding that reads its input
            (data-dependent biases), and keeps it with the KV cache.
        carried_keys: the keys before the queries are what the encoding's ``carry_keys``
            returned for them (a KV cache of an encoding that carries its keys, PaTH), not
            the keys as projected; False (the default) for every other call.

    The plain constructor trusts its arguments (attention builds one per call from positions
    the model validated once per forward); :meth:`for_positions` checks them.
    """

    q_pos: Tensor
    k_pos: Tensor
    causal: bool = False
    consecutive: bool = False
    backend: str | None = None
    axes: Tensor | None = None
    key_terms: Tensor | None = None
    carried_keys: bool = False

    @classmethod
    def for_positions(cls, q_pos: Tensor, k_pos: Tensor | None = None, *,
                      causal: bool = False, consecutive: bool = False,
                      backend: str | None = None, axes: Tensor | None = None,
                      key_terms: Tensor | None = None) -> HookContext:
        """A checked context: integer q_pos (Lq,) or (B, Lq) and k_pos (default: q_pos);
        ``axes`` (A, Lq) or (A, B, Lq) needs k_pos to be q_pos; ``key_terms`` None or
        (B, H, Lk, K) floats. UserError naming the argument otherwise."""
        k_pos = q_pos if k_pos is None else k_pos
        check_positions("q_pos", q_pos, None)
        check_positions("k_pos", k_pos, None)
        for name, flag in (("causal", causal), ("consecutive", consecutive)):
            if not isinstance(flag, bool):
                raise UserError(f"{name} must be True or False, got {flag!r}")
        if backend is not None and backend not in HOOK_BACKENDS:
            raise UserError(f"backend must be None or one of {', '.join(HOOK_BACKENDS)}, "
                            f"got {backend!r}")
        if axes is not None:
            if k_pos is not q_pos:
                raise UserError("axes (positions per axis) are the queries' own; they need "
                                "k_pos to be q_pos (self-attention over the same tokens)")
            n_axes = axes.shape[0] if isinstance(axes, Tensor) and axes.dim() > 1 else 2
            check_axis_positions("axes", axes, n_axes, q_pos.shape[-1],
                                 q_pos.shape[0] if q_pos.dim() == 2 else None)
        if key_terms is not None and not (
                isinstance(key_terms, Tensor) and key_terms.dim() == 4
                and key_terms.is_floating_point() and key_terms.shape[2] == k_pos.shape[-1]):
            got = (f"shape {tuple(key_terms.shape)}, dtype {key_terms.dtype}"
                   if isinstance(key_terms, Tensor) else type(key_terms).__name__)
            raise UserError(f"key_terms must be None or a float tensor (batch, heads, "
                            f"{k_pos.shape[-1]}, terms), one row per key, got {got}")
        return cls(q_pos, k_pos, causal, consecutive, backend, axes, key_terms)

    def layout_kind(self) -> str:
        """How per-distance tables become pair terms here: "causal", "window" or "gather"
        (posenc.kernels.layouts.relative_shift), from the host facts only."""
        return layout_kind(self.q_pos, self.k_pos, self.causal, self.consecutive)

    def pair_layout(self) -> PairLayout:
        """The cheapest exact :class:`PairLayout` for these positions."""
        return pair_layout(self.q_pos, self.k_pos, self.causal, self.consecutive)

    def with_backend(self, backend: str) -> HookContext:
        """The same call, consumed by ``backend``."""
        return replace(self, backend=backend)

    def with_carried_keys(self) -> HookContext:
        """The same call, whose keys before the queries come from ``carry_keys``."""
        return replace(self, carried_keys=True)

    def with_key_terms(self, key_terms: Tensor | None) -> HookContext:
        """The same call, with the encoding's terms of every key (attention fills them)."""
        return replace(self, key_terms=key_terms)
