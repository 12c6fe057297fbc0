"""The registry of study kinds: each study module registers its :class:`StudyKind` once, and
``posenc plot`` finds the kind of a results.json (and how to redraw it) here."""

from __future__ import annotations

from .rundir import StudyKind

_KINDS: dict[str, StudyKind] = {}


def register_kind(kind: StudyKind) -> StudyKind:
    """Record ``kind`` under its name (once; a second kind of the same name is a bug) and
    return it, so a module writes ``KIND = register_kind(StudyKind(...))``."""
    held = _KINDS.get(kind.name)
    if held is not None and held is not kind:
        raise ValueError(f"two study kinds are named {kind.name!r}")
    _KINDS[kind.name] = kind
    return kind


def registered_kinds() -> tuple[StudyKind, ...]:
    """Every kind registered so far, in the order their modules were imported."""
    return tuple(_KINDS.values())
