"""Encodings that a comparison's model shape puts outside the regime they were designed for,
named beside every verdict that rests on them.

- ALiBi: Press, Smith and Lewis (2022), Section 3, set the slopes for 8 heads to
  1/2, 1/4, ..., 1/256 (a geometric sequence starting at 2^(-8/H) for H heads): with fewer
  heads the few slopes are spread over the same range, so at 2 heads they are 1/16 and 1/256
  and no head has a strong recency bias.
- RoPE's family: a head of width d has d/2 frequencies; below :data:`MIN_ROTARY_PAIRS` pairs
  the spectrum between the fastest and the slowest rotation is sampled coarsely.
"""

from __future__ import annotations

import re

from ..runs.variants import base_encoding, run_family

#: ALiBi's slopes were chosen for this many heads or more
ALIBI_HEADS = 8
#: fewer rotary frequency pairs per head than this is noted for RoPE-family runs
MIN_ROTARY_PAIRS = 8


def is_rotary_run(name: str) -> bool:
    """Whether a lab run's positions are RoPE's rotations: its encoding, or the encoding of
    its variant (a plan's RoPE layers), is in the rotary family."""
    return run_family(base_encoding(name)) == "rotary"


def shape_handicaps(config: dict) -> dict[str, str]:
    """{run name: why the comparison's shape handicaps it} for the runs of ``config`` (a
    results.json config block)."""
    from ...encodings.alibi import alibi_slopes
    model = (config.get("train") or {}).get("model") or {}
    heads, width = model.get("n_heads"), model.get("d_model")
    names = set(config.get("encodings") or ())
    out: dict[str, str] = {}
    if not heads or not width:
        return out
    if "alibi" in names and heads < ALIBI_HEADS:
        slopes = ", ".join(f"1/{round(1 / s):d}" for s in alibi_slopes(heads).tolist())
        out["alibi"] = (f"ALiBi with {heads} heads has slopes {slopes}; its slopes were set "
                        f"for {ALIBI_HEADS} or more heads (Press et al. 2022, Section 3), so "
                        "its recency bias is weaker here than designed")
    pairs = width // heads // 2
    if pairs < MIN_ROTARY_PAIRS:
        for name in sorted(n for n in names if is_rotary_run(n)):
            out[name] = (f"{name} has {pairs} frequency pairs per head (head width "
                         f"{width // heads}), fewer than {MIN_ROTARY_PAIRS}")
    return out


def handicaps_in(rule: str, handicaps: dict[str, str]) -> list[str]:
    """The handicapped runs a claim's ``rule`` names (whole words, so ``rope`` is not found
    in ``p_rope``), in the rule's order."""
    found = [(m.start(), name) for name in handicaps
             for m in [re.search(rf"(?<![\w]){re.escape(name)}(?![\w])", rule)] if m]
    return [name for _, name in sorted(found)]


def verdict_handicaps(rule: str, handicaps: dict[str, str]) -> list[str]:
    """The handicapped runs a quality claim's ``rule`` rests on; none for a speed claim (a
    slope or a head width does not change what a step costs)."""
    return [] if "step time" in rule else handicaps_in(rule, handicaps)


def handicap_preamble(handicaps: dict[str, str]) -> list[str]:
    """The report paragraph listing every handicap of the shape (none: no lines)."""
    if not handicaps:
        return []
    return ["Handicaps of this shape (named beside each verdict they touch): "
            + "; ".join(handicaps.values()) + ".", ""]


def handicap_tag(names: list[str]) -> str:
    """`` (handicap: alibi)`` after a verdict that rests on the runs ``names``; "" if none."""
    return f" (handicap: {', '.join(names)})" if names else ""


def handicap_lines(names: list[str], handicaps: dict[str, str]) -> list[str]:
    """One indented ``Handicap: ...`` line per run ``names`` of a verdict's details."""
    return [f"   Handicap: {handicaps[name]}." for name in names]
