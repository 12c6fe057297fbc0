"""One grammar for naming an extension method, for every command and for Python.

``NAME[:FACTOR][+ADDON...]``: a registered method (:func:`~posenc.methods.base.list_methods`),
its context multiplier, and add-ons ``logn`` (log-n query temperature) and ``exact`` (an exact
KV cache for a length-dependent frequency method). ``logn`` alone means ``none+logn``.
Examples: ``yarn:4``, ``yarn:4+logn``, ``dynamic+exact``, ``self_extend:4``, ``rerope``,
``logn``. Names are case-sensitive.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..errors import UserError
from ..suggest import did_you_mean
from .base import MAX_FACTOR, ExtensionMethod, list_methods, method_class

#: add-ons a spec may carry after ``+``
ADDONS = ("logn", "exact")


def format_factor(factor: float) -> str:
    """``4.0`` -> ``"4"``, ``2.5`` -> ``"2.5"``: a factor as a spec writes it."""
    return f"{factor:g}"


@dataclass(frozen=True)
class MethodSpec:
    """A parsed spec: the method's ``name``, its ``factor`` (None when the spec gives none),
    and the add-ons."""

    name: str = "none"
    factor: float | None = None
    logn: bool = False
    exact: bool = False

    @property
    def method(self) -> type[ExtensionMethod]:
        return method_class(self.name)

    @property
    def label(self) -> str:
        """The spec as text (inverse of :func:`parse_method_spec`): ``"yarn:4+logn"``."""
        head = [] if self.name == "none" and self.logn else [self.name]
        if head and self.factor is not None:
            head = [f"{self.name}:{format_factor(self.factor)}"]
        return "+".join(head + (["logn"] if self.logn else []) +
                        (["exact"] if self.exact else []))

    def flags(self) -> dict[str, bool]:
        """The add-ons as keyword options (``logn``, ``exact_cache``)."""
        return {**({"logn": True} if self.logn else {}),
                **({"exact_cache": True} if self.exact else {})}


def _factor(text: str, spec: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise UserError(f"the factor in {spec!r} is not a number") from None
    if not math.isfinite(value) or value <= 0 or value > MAX_FACTOR:
        raise UserError(f"the factor in {spec!r} must be a finite number in (0, "
                        f"{MAX_FACTOR:g}]")
    return value


def parse_method_spec(spec: Any) -> MethodSpec:
    """``"yarn:4+logn"`` -> MethodSpec("yarn", 4.0, logn=True); a UserError naming the part
    that is wrong (an unknown name with a suggestion, a repeated add-on, two methods, an
    add-on the method cannot take, a factor on a method that reads none)."""
    if not isinstance(spec, str) or not spec.strip():
        raise UserError(f"a method must be a name like 'yarn:4' or 'ntk:4+logn', got {spec!r}")
    name, factor, addons = None, None, []
    for part in spec.split("+"):
        head, colon, value = part.partition(":")
        if head in ADDONS and not colon:
            if head in addons:
                raise UserError(f"method {spec!r} repeats the add-on {head!r}")
            addons.append(head)
            continue
        if head not in list_methods():
            valid = list_methods() + list(ADDONS)
            raise UserError(f"unknown method {head!r} in {spec!r}{did_you_mean(head, valid)}; "
                            f"valid: {', '.join(list_methods())} (add-ons: +logn, +exact)")
        if name is not None:
            raise UserError(f"method {spec!r} names two methods ({name!r}, {head!r}); give one, "
                            "with add-ons after '+', e.g. 'yarn:4+logn'")
        name = head
        if colon:
            factor = _factor(value, spec)
    name = name or "none"
    cls = method_class(name)
    if factor is not None and not cls.reads_factor:
        raise UserError(f"method {name!r} takes no factor (got {spec!r}); write {name!r}")
    if factor is not None:
        cls.check_factor(factor)
    if addons and cls.kind in ("region", "structural"):
        what = "remaps" if cls.kind == "region" else "removes"
        raise UserError(f"method {name!r} goes alone: it {what} positions itself, so no "
                        f"add-ons ({', '.join('+' + a for a in addons)})")
    if "exact" in addons and not getattr(cls, "length_dependent", lambda: False)():
        raise UserError(f"'+exact' applies to methods whose frequencies follow the length "
                        f"(dynamic, longrope); {name!r} caches exactly as it is")
    if name == "none" and not addons and spec.strip() != "none":
        raise UserError(f"method {spec!r} names nothing to do")
    return MethodSpec(name, factor, "logn" in addons, "exact" in addons)


def spec_citation(spec: str) -> str:
    """The published source of the method a spec names (``"yarn:4+logn"`` -> YaRN's,
    ``"logn"`` -> log-n's), "" for none."""
    parsed = parse_method_spec(spec)
    name = "logn" if parsed.name == "none" and parsed.logn else parsed.name
    citation = method_class(name).citation
    return str(citation) if citation is not None else ""


def sources_lines(specs: list[str]) -> list[str]:
    """Markdown bullets ``- `yarn:4`: Peng et al. 2023, ...`` for the specs that cite one."""
    return [f"- `{s}`: {spec_citation(s)}" for s in specs if spec_citation(s)]
