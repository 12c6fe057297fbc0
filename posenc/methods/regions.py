"""Region methods: RoPE positions remapped per region of (query, key) pairs.

Each region method keeps the model's RoPE frequencies and changes which positions a query and
a key are rotated by, depending on where the pair lies (its distance d = i - j, its chunks).
Its :meth:`RegionMethod.regions` returns a list of :class:`Region`: a boolean mask of the
(query, key) pairs it covers and the positions its queries and keys are rotated by there.
Attention (:mod:`posenc.attention.extension_methods`) rotates the raw (unrotated) q and k
once per region and scores each pair in its region, so a key cache for these methods keeps
raw keys. The methods are pure functions of positions (no tensors of the model).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor

from ..errors import UserError
from .base import ExtensionMethod


@dataclass(frozen=True)
class Region:
    """Pairs ``mask`` (Tq, Tk) bool, whose queries sit at ``q_pos`` (Tq,) and keys at
    ``k_pos`` (Tk,), both in units of ``scale`` positions: integer tensors where whole (a
    rotary table can then look them up), float where fractional."""

    name: str
    mask: Tensor
    q_pos: Tensor
    k_pos: Tensor
    scale: float = 1.0


def distance(q_pos: Tensor, k_pos: Tensor) -> Tensor:
    """d = i - j of every (query, key) pair: (Tq, Tk)."""
    return q_pos[:, None] - k_pos[None, :]


def positive_int(name: str, value: object) -> int:
    """``value`` if a positive int, else a UserError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UserError(f"{name} must be a positive integer, got {value!r}")
    return value


class RegionMethod(ExtensionMethod):
    """Base of the region methods: subclasses are frozen dataclasses of their options."""

    kind = "region"
    factor_rule = "at_least_one"
    needs = "RoPE itself, frequencies fixed whatever the length, no logits factor"
    gguf_refusal: ClassVar[str | None] = (
        "its positions per region of (query, key) need patched attention, which GGUF "
        "metadata cannot express")
    #: whether the method drops keys from a cache (it then names those it :meth:`kept`)
    evicts: ClassVar[bool] = False
    #: whether every region gives each query one run of keys [f_i, l_i] whose ends never
    #: decrease from one query to the next (a band, a shifted causal, chunk steps, sinks):
    #: attention on a CPU then reads a block's region from its ends alone
    #: (:mod:`posenc.attention.region_flash`). A method that does not declare it is read
    #: whole, to the same result, more slowly.
    rising_runs: ClassVar[bool] = False

    @classmethod
    def create(cls, original: int, factor: float, options: dict[str, Any]) -> RegionMethod:
        return cls(**options)

    def regions(self, q_pos: Tensor, k_pos: Tensor) -> list[Region]:
        """The regions covering the (query, key) pairs of ``q_pos`` (Tq,) x ``k_pos`` (Tk,)."""
        raise NotImplementedError

    def longest_relative(self, length: int) -> float:
        """The largest relative position a sequence of ``length`` tokens uses."""
        raise NotImplementedError

    def settings(self) -> dict[str, Any]:
        """The resolved options, by name (what a report or a saved config records)."""
        return asdict(self)


def relative_positions(method: RegionMethod, q_pos: Tensor, k_pos: Tensor) -> Tensor:
    """The relative position each (query, key) pair is scored at under ``method``:
    (Tq, Tk) float, NaN where the pair is masked (the position map, for tests and figures)."""
    out = torch.full((q_pos.numel(), k_pos.numel()), float("nan"))
    for region in method.regions(q_pos, k_pos):
        rel = (region.q_pos[:, None] - region.k_pos[None, :]).float() * region.scale
        out = torch.where(region.mask, rel, out)
    return out
