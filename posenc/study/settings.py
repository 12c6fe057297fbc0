"""How a study says, in one line, that the settings in a folder differ from those asked for."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any


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

