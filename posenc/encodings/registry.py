"""The registry's queries: which encodings exist, what options each takes, and building one.

Encodings join with :func:`~posenc.encodings.base.register` (a class decorator beside the
interface); everything here reads that registry.
"""

from __future__ import annotations

import inspect
from typing import Any

from ..errors import UserError
from ..suggest import did_you_mean
from .base import _REGISTRY, PositionalEncoding


def list_encodings() -> list[str]:
    """Registry keys of every encoding, sorted."""
    return sorted(_REGISTRY)


def encoding_class(name: str) -> type[PositionalEncoding]:
    """The class registered as ``name``; UserError listing valid names otherwise."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise UserError(
            f"unknown encoding {name!r}{did_you_mean(name, _REGISTRY)}; valid encodings: "
            f"{', '.join(list_encodings())}") from None


def encoding_options(name: str) -> dict[str, Any]:
    """Options ``build_encoding(name, ...)`` accepts, with their defaults."""
    cls = encoding_class(name)
    options: dict[str, Any] = {}
    for klass in reversed(cls.__mro__):
        if not (isinstance(klass, type) and issubclass(klass, PositionalEncoding)):
            continue
        for p in inspect.signature(klass.__init__).parameters.values():
            if p.kind is p.KEYWORD_ONLY:
                options[p.name] = None if p.default is p.empty else p.default
    return options


#: facts about the model an encoding may declare as options (with default None): a model
#: passes its own value unless the user gave one
MODEL_FACTS = ("vocab_size", "n_layers", "d_model")


def with_model_facts(name: str, options: dict[str, Any], **facts: Any) -> dict[str, Any]:
    """``options`` plus the model ``facts`` (:data:`MODEL_FACTS`) the encoding ``name``
    declares and the user did not set; UserError for an unknown fact."""
    unknown = sorted(set(facts) - set(MODEL_FACTS))
    if unknown:
        raise UserError(f"unknown model fact(s) {', '.join(unknown)}; known: "
                         f"{', '.join(MODEL_FACTS)}")
    declared = encoding_options(name)
    given = {key: value for key, value in facts.items()
             if key in declared and options.get(key) is None}
    return {**options, **given}


def build_encoding(name: str, *, n_heads: int | None = None, head_dim: int | None = None,
                   max_len: int | None = None, **options: Any) -> PositionalEncoding:
    """Build the encoding registered as ``name``.

    Raises UserError for an unknown name or option (listing the valid ones, with a
    suggestion for a near miss), a missing ``n_heads`` or ``head_dim``, and option values out
    of range (naming the option and its valid range).
    """
    cls = encoding_class(name)
    missing = [k for k, v in (("n_heads", n_heads), ("head_dim", head_dim)) if v is None]
    if missing:
        raise UserError(f"build_encoding({name!r}, ...) needs {' and '.join(missing)} (the "
                        "attention's heads and their size), e.g. n_heads=8, head_dim=64")
    valid = set(encoding_options(name)) - {"n_heads", "head_dim", "max_len"}
    unknown = sorted(set(options) - valid)
    if unknown:
        hint = did_you_mean(unknown[0], valid) if len(unknown) == 1 else ""
        raise UserError(
            f"unknown option(s) {', '.join(unknown)}{hint} for encoding {name!r}; "
            f"valid options: {', '.join(sorted(valid)) or '(none)'}"
        )
    return cls(n_heads=n_heads, head_dim=head_dim, max_len=max_len, **options)


def describe_encodings() -> list[dict[str, Any]]:
    """One row per encoding for ``posenc list``: family, hooks, extrapolation, cache, backends."""
    rows = []
    for name in list_encodings():
        cls = _REGISTRY[name]
        rows.append({
            "name": name,
            "family": cls.family,
            "hooks": cls.hook_kinds(),
            "extrapolates": cls.extrapolates,
            "kv_cache": cls.cache_note,
            "backends": list(cls.backends()),
            "options": {k: v for k, v in encoding_options(name).items()
                        if k not in ("n_heads", "head_dim", "max_len")},
        })
    return rows
