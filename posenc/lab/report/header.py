"""The opening lines of a comparison's report: the data as the user named it, with its size,
and the settings the comparison actually ran with (the preset it started from and what was
changed from it), never facts that do not apply (the Python version names only the standard
library corpus, whose text it fixes)."""

from __future__ import annotations

from typing import Any

from ...data.corpora import SPEC_NAMES
from ..runs.variants import takes_scaling


def data_line(results: dict[str, Any]) -> str:
    """``Data `notes.txt` (123,456 tokens: train ..., test ...; sha256 ...).`` (a name given
    for a corpus, such as ``prose``, is followed by the corpus it named), or, for the
    standard library, ``Corpus `stdlib`: the Python 3.11.7 standard library (sha256 ...).``"""
    corpus = results.get("corpus", {})
    given = ((results.get("config") or {}).get("train") or {}).get("data")
    name = corpus.get("name")
    digest = f"sha256 {str(corpus.get('sha256', ''))[:16]}..."
    if name == "stdlib" and given in (None, "stdlib"):
        return (f"Corpus `stdlib`: the Python {corpus.get('python_version')} standard library "
                f"({digest}).")
    tokens = corpus.get("tokens") or {}
    size = ""
    if tokens:
        size = (f"{sum(tokens.values()):,} tokens: "
                + ", ".join(f"{split} {n:,}" for split, n in tokens.items()) + "; ")
    named = given in SPEC_NAMES and name and name != given      # e.g. prose: the essays
    shown = f"`{given}` (corpus `{name}`)" if named else f"`{given or name}`"
    return f"Data {shown} ({size}{digest})."


def settings_line(results: dict[str, Any], train_len: int,
                  changed: list[str] | None = None) -> str:
    """What was trained and how, and the preset it came from with what was ``changed``
    (:func:`posenc.lab.compare.presets.changed_from_preset`, given by the comparison)."""
    c = results.get("config", {})
    t = c.get("train") or {}
    m = t.get("model") or {}
    seeds, first = int(c.get("seeds", 1)), int(t.get("seed", 0))
    origin = f"preset `{c.get('preset')}`"
    if changed:
        origin += ", changed: " + ", ".join(changed)
    return (f"Encodings {', '.join(c.get('encodings', []))}; trained at L = {train_len} for "
            f"{t.get('steps')} steps of {t.get('batch_size')} sequences; model "
            f"d_model={m.get('d_model')}, n_layers={m.get('n_layers')}, "
            f"n_heads={m.get('n_heads')}; tokenizer `{t.get('tokenizer')}`; "
            + (f"seeds {first}..{first + seeds - 1}" if seeds > 1 else f"seed {first}")
            + f" ({origin}). Inference-time scalings: "
            + f"{', '.join(used_scalings(c)) or 'none'}.")


def used_scalings(config: dict[str, Any]) -> list[str]:
    """The configured inference-time scalings that apply to at least one encoding run."""
    return [s for s in config.get("scalings", [])
            if any(takes_scaling(e, s) for e in config.get("encodings", []))]
