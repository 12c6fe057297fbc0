"""Growing a comparison: which settings may change between calls on one folder, and the
config that results.

A comparison's folder grows by encodings, seeds, scalings and timing rounds; any other
setting that differs makes the old runs incomparable with the new (:func:`incomparable_reason`
names it in one line). Config dicts written before training and model settings were nested
are migrated on read (:func:`~posenc.lab.compare.base_train.migrate_config`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from .base_train import migrate_config
from .presets import CompareConfig

#: settings a comparison may grow in without its old runs becoming incomparable
GROWABLE = ("preset", "encodings", "seeds", "scalings", "timing_rounds", "pe_options")
#: settings not compared by value: the data is compared by content (the corpus hash) once
#: it is loaded, and where and how the models run (device, compiled or not) does not make
#: their runs incomparable
NOT_COMPARED = ("train.data", "train.device", "train.cache_dir", "train.compile")


def settings(config: dict[str, Any]) -> dict[str, Any]:
    """A config dict's settings by dotted name (``train.lr``, ``train.model.d_model``)."""
    out: dict[str, Any] = {}

    def walk(d: dict[str, Any], prefix: str) -> None:
        for key, value in d.items():
            if key in ("train", "model") and isinstance(value, dict):
                walk(value, f"{prefix}{key}.")
            else:
                out[prefix + key] = value
    walk(migrate_config(config), "")
    return out


def incomparable_reason(old: dict[str, Any], new: CompareConfig) -> str | None:
    """Why runs made under the config dict ``old`` cannot sit beside runs of ``new`` (one
    line), or None when ``new`` only adds encodings, seeds, scalings or timing rounds.
    ``train.data`` and ``train.device`` are not compared: the caller compares the data by
    its content once loaded, and a comparison may grow on another device."""
    theirs, ours = settings(old), settings(new.to_dict())
    for key in sorted(set(theirs) | set(ours)):
        if key not in GROWABLE + NOT_COMPARED and theirs.get(key) != ours.get(key):
            return f"{key} is {theirs.get(key, 'unset')!r} there but {ours.get(key)!r} now"
    theirs_opts, our_opts = old.get("pe_options") or {}, new.pe_options
    for enc in set(old.get("encodings") or ()) & set(new.encodings):
        if theirs_opts.get(enc, {}) != our_opts.get(enc, {}):
            return (f"options of {enc} are {theirs_opts.get(enc, {})} there but "
                    f"{our_opts.get(enc, {})} now")
    return None


def merged(old: dict[str, Any], new: CompareConfig) -> CompareConfig:
    """The config of a comparison grown from ``old`` by ``new``: the union of encodings and
    scalings (old ones first), the larger number of seeds. Assumes they are comparable."""
    encodings = list(old.get("encodings") or ())
    encodings += [e for e in new.encodings if e not in encodings]
    scalings = list(old.get("scalings") or ())
    scalings += [s for s in new.scalings if s not in scalings]
    options = {**(old.get("pe_options") or {}), **new.pe_options}
    return replace(new, encodings=tuple(encodings), scalings=tuple(scalings),
                   seeds=max(int(old.get("seeds", 1)), new.seeds), pe_options=options)
