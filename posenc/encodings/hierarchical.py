"""Hierarchical decomposition of a learned position table (Su, "层次分解位置编码", 2020).

A table p_0..p_{n-1} trained on n positions is extended to n² positions. Position
``i * n + j`` (0-based, 0 <= i, j < n) gets

    u_{i n + j} = alpha * q_i + (1 - alpha) * q_j,    q_i = (p_i - alpha * p_0) / (1 - alpha).

The base vectors q are the trained vectors recentred so that the first block reproduces the
table exactly: for i = 0, u_j = alpha q_0 + (1 - alpha) q_j = alpha p_0 + p_j - alpha p_0 = p_j.
(Su's post writes the same with 1-based indices and p_1.) Later blocks i >= 1 repeat the trained
fine structure q_j, shifted by a block vector alpha q_i; alpha < 0.5 keeps the block part the
smaller one so that positions in different blocks stay distinguishable.

The parameter is the trained table itself (``table``, as in :class:`LearnedEncoding`), so
:func:`extend_learned_model` converts a trained model by swapping the encoding object and
copying the table; the state dict keeps the same key and shape.
"""

from __future__ import annotations

import dataclasses

import torch
from torch import Tensor, nn

from ..errors import UserError
from .absolute import LearnedEncoding
from .base import PositionalEncoding, register
from .checks import check_in_range, require_float_in, require_int_at_least, require_positive_int
from .limits import PositionLimit
from .registry import build_encoding


def hierarchical_positions(table: Tensor, pos: Tensor, alpha: float) -> Tensor:
    """u at positions pos (T,) from a trained table (n, C) -> (T, C); pos must be < n²."""
    n = table.shape[0]
    base = (table - alpha * table[0]) / (1.0 - alpha)                 # (n, C) q vectors
    block, offset = torch.div(pos, n, rounding_mode="floor"), pos % n  # (T,) each
    return alpha * base[block] + (1.0 - alpha) * base[offset]


@register("hierarchical")
class HierarchicalEncoding(PositionalEncoding):
    """x_p + u_p with u the hierarchical extension of a learned table of ``base_len`` rows.

    Options:
        alpha: block weight in (0, 1), default 0.4.
        base_len: rows of the trained table n (default: max_len).
        n_positions: positions served, in [base_len, base_len²] (default base_len²);
            positions past it raise UserError.
        init_std: spread of a freshly initialised table (0.02), as for ``learned``.
    """

    family = "absolute"
    extrapolates = "to n² positions (a learned table of n, decomposed)"

    def __init__(self, *, alpha: float = 0.4, base_len: int | None = None,
                 n_positions: int | None = None, init_std: float = 0.02, **kw) -> None:
        super().__init__(**kw)
        self.alpha = require_float_in("alpha", alpha, 0.0, 1.0)
        if base_len is None:
            if self.max_len is None:
                raise UserError("hierarchical encoding needs base_len (rows of the trained "
                                 "table) or max_len to default it, a positive int")
            base_len = self.max_len
        require_positive_int("base_len", base_len)
        if n_positions is None:
            n_positions = base_len * base_len
        require_int_at_least("n_positions", n_positions, 1)
        if not base_len <= n_positions <= base_len * base_len:
            raise UserError(
                f"n_positions must be in [base_len, base_len²] = [{base_len}, "
                f"{base_len * base_len}] (a hierarchical table of n rows serves at most n² "
                f"positions), got {n_positions}")
        self.init_std = require_float_in("init_std", init_std, 0.0, float("inf"),
                                         low_open=False)
        self.base_len = base_len
        self.n_positions = n_positions
        self.table = nn.Parameter(torch.randn(base_len, self.n_heads * self.head_dim)
                                  * init_std)

    @property
    def position_limit(self) -> PositionLimit:
        """The last of the ``n_positions`` the extended table serves."""
        return PositionLimit(self.n_positions - 1, "hierarchical", encoding=self.name)

    def embed(self, x: Tensor, pos: Tensor, *, ids: Tensor | None = None,
              state: dict | None = None) -> Tensor:
        check_in_range(pos, 0, self.n_positions, lambda bad: (
            f"position {bad} is outside the hierarchical table: positions must be in "
            f"[0, {self.n_positions}) (n_positions={self.n_positions}, "
            f"base_len={self.base_len})"))
        if x.shape[-1] != self.table.shape[-1]:
            raise UserError(f"hierarchical table width {self.table.shape[-1]} != model "
                             f"width {x.shape[-1]}")
        return x + hierarchical_positions(self.table, pos, self.alpha).to(x.dtype)

    def extra_repr(self) -> str:
        return (f"{super().extra_repr()}, alpha={self.alpha}, base_len={self.base_len}, "
                f"n_positions={self.n_positions}")


def extend_learned_model(model: nn.Module, alpha: float = 0.4,
                         n_positions: int | None = None) -> nn.Module:
    """Convert a model trained with the ``learned`` encoding to ``hierarchical``, in place.

    ``model`` has a ``pe`` attribute holding a :class:`LearnedEncoding` and a frozen
    ``config`` dataclass with ``pe`` and ``pe_options`` fields (a ``TransformerLM``). The
    encoding object is replaced by a :class:`HierarchicalEncoding` holding the same trained
    table Parameter (positions 0..n-1 are unchanged; an optimizer built before the conversion
    keeps training it), and the config is replaced so that a model rebuilt from it loads the
    same state dict. Returns the model.
    """
    old = getattr(model, "pe", None)
    if not isinstance(old, LearnedEncoding):
        raise UserError(f"extend_learned_model needs a model whose encoding is 'learned', "
                         f"got {getattr(old, 'name', type(old).__name__)!r}")
    config = getattr(model, "config", None)
    if config is None or not dataclasses.is_dataclass(config):
        raise UserError("extend_learned_model needs a model with a dataclass `config` "
                         "(pe, pe_options), such as TransformerLM")
    n = old.table.shape[0]
    options = {**config.pe_options, "alpha": alpha, "base_len": n}
    if n_positions is not None:
        options["n_positions"] = n_positions
    new = build_encoding("hierarchical", n_heads=old.n_heads, head_dim=old.head_dim,
                         max_len=old.max_len, **options)
    new.table = old.table             # the same Parameter: an existing optimizer keeps it
    new.train(old.training)
    model.pe = new
    model.config = dataclasses.replace(config, pe="hierarchical", pe_options=options)
    return model
