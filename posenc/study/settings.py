"""How a study says that the settings in a folder differ from those asked for, and refuses a
rerun that did not ask to resume."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ..errors import UserError


def short(value: Any, most: int = 40) -> str:
    """``value`` as JSON, cut to ``most`` characters with "..." (for one-line messages)."""
    text = json.dumps(value)
    return text if len(text) <= most else text[:most - 3] + "..."


def settings_difference(old: Any, new: Mapping[str, Any],
                        unrecorded: str = "it records no settings") -> str | None:
    """``"key OLD there, NEW now; ..."`` for every key whose value differs between the
    settings a folder recorded (``old``) and those asked for (``new``); None when they are
    equal; ``unrecorded`` when the folder recorded none (``old`` not a mapping)."""
    if not isinstance(old, Mapping):
        return unrecorded
    differ = [k for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]
    return "; ".join(f"{k} {short(old.get(k))} there, {short(new.get(k))} now"
                     for k in differ) or None


def require_resume(existing: Any, resume: bool, what: str, names: Mapping[str, str]) -> None:
    """UserError when a folder already holds ``what`` (``existing`` results) and the caller
    neither asked to resume nor to start again (``names``: how the caller spells both)."""
    if existing is not None and not resume:
        raise UserError(f"the output directory holds a {what}; pass {names['resume']} to "
                        f"continue it or {names['overwrite']} to start again")
