"""results.json of a comparison: its layout and kind for the study core, and one run's entry
over its seeds.

Layout::

    {"kind": "compare", "schema": 1, "config": CompareConfig.to_dict(), "corpus": {...},
     "baseline": {"unigram_ppl", "tokens", "learned_fraction"},
     "timing": {"rounds", "step_seconds": {enc: [s, ...]}, "relative_to_median": {...}},
     "runs": [{"encoding", "inference_scaling", "label", "options", "train_len", "steps",
               "params", "ppl": {n: mean}, "ppl_spread": {n: spread},
               "ratio_spread": {n: spread of ppl(n) / ppl(L)}, "spread_kind",
               "train_tokens_per_s", "final_loss", "curve", "entropy", "run_dir",
               "seeds": [{"seed", "ppl", "ppl_tokens", "window_nll", "window_tokens",
                          "train_tokens_per_s", "final_loss", "curve", "entropy",
                          "seconds", "run_dir"}, ...]}, ...]}

A run's top-level numbers are means over its seeds; ``ppl_spread`` is the seed-to-seed sample
standard deviation with two or more seeds (``spread_kind`` "seeds"), else the bootstrap
standard deviation over evaluation windows ("bootstrap"). A length one seed cannot serve
keeps that seed's note as the run's value.
"""

from __future__ import annotations

import math
from typing import Any

from ...study import StudyKind, register_kind
from ..claims.stats import BOOTSTRAP, SEEDS, Estimate, bootstrap_samples
from ..report.redraw import redraw_comparison
from .base_train import migrate_config
from .presets import changed_from_preset

RESULTS = "results.json"


#: the files every comparison may write into its folder, by exact name (with
#: :func:`named_outputs`: what an overwrite removes from a folder written before posenc
#: listed its outputs; a user's files beside them stay)
OUTPUTS = (RESULTS, "report.md", "index.html", "ppl_vs_length.png", "ppl_ratio.png",
           "training_curves.png", "entropy_vs_length.png", "atlas/atlas.json",
           "atlas/index.html", "atlas/index.md")


def named_outputs(results: dict) -> list[str]:
    """The atlas's figures and the run files in ``runs/<encoding>/seed<k>`` of every
    (encoding, seed) that ``results`` plans or holds, by exact name."""
    from ...atlas import atlas_files
    from .one_run import run_dir_of, run_files

    def mapping(value: Any) -> dict:
        return value if isinstance(value, dict) else {}

    def items(value: Any) -> list:
        return value if isinstance(value, list) else []
    config = mapping(results.get("config"))
    first, count = mapping(config.get("train")).get("seed", 0), config.get("seeds", 1)
    pairs = {(e, s) for e in items(config.get("encodings")) for s in range(first, first + count)
             } if isinstance(first, int) and isinstance(count, int) else set()
    pairs |= {(run.get("encoding"), seed.get("seed"))
              for run in map(mapping, items(results.get("runs")))
              for seed in map(mapping, items(run.get("seeds"))) if "seed" in seed}
    return [*(f"atlas/{name}" for name in atlas_files()),
            *(name for e, s in sorted(pairs, key=str)
              if isinstance(e, str) and isinstance(s, int) and not isinstance(s, bool)
              for name in run_files(run_dir_of(e, s)))]


def _is_legacy(data: dict) -> bool:
    """A comparison's results.json written before kinds and schemas were stamped."""
    return "kind" not in data and {"config", "corpus", "runs"} <= set(data)


def _migrate(data: dict, schema: int) -> dict:
    """Schema 0 (a flat config block) in the current layout (the nested config)."""
    return {**data, "config": migrate_config(data["config"])}


def _redraw(results: dict, directory) -> list:
    return redraw_comparison(results, directory, changed_from_preset(results.get("config", {})))


#: the comparison as the study core knows it (:class:`~posenc.study.StudyKind`)
COMPARE_KIND = register_kind(StudyKind(
    name="compare", schema=1, command="posenc compare", outputs=OUTPUTS, legacy=_is_legacy,
    migrate=_migrate, description="comparison", redraw=_redraw,
    named_outputs=named_outputs))


def _number(value: Any) -> float | None:
    if value == "inf":
        return math.inf
    return float(value) if isinstance(value, (int, float)) else None


def _mean(values: list) -> float | None:
    numbers = [v for v in (_number(x) for x in values) if v is not None]
    return sum(numbers) / len(numbers) if numbers and len(numbers) == len(values) else None


def ppl_estimate(seeds: list[dict], length: str, blocked: bool = True) -> Estimate | None:
    """Mean and spread of one length's perplexity over seed entries (bootstrap with one)."""
    values = [_number(s.get("ppl", {}).get(length)) for s in seeds]
    if not values or any(v is None for v in values):
        return None
    if len(seeds) >= 2:
        return Estimate.of(values, SEEDS)
    boot = bootstrap_samples(seeds[0], length, blocked)
    if boot is None or not math.isfinite(values[0]):
        return Estimate(values[0], 0.0 if math.isfinite(values[0]) else math.nan, BOOTSTRAP, 0)
    est = Estimate.of(boot, BOOTSTRAP)
    return Estimate(values[0], est.spread, BOOTSTRAP, est.n)


def _mean_curve(curves: list[list]) -> list[list[float]]:
    curves = [c for c in curves if c]
    if not curves:
        return []
    steps = [p[0] for p in curves[0]]
    if any([p[0] for p in c] != steps for c in curves):
        return curves[0]
    return [[s, sum(c[i][1] for c in curves) / len(curves)] for i, s in enumerate(steps)]


def _mean_entropy(entries: list[dict | None]) -> dict | None:
    entries = [e for e in entries if e]
    if not entries:
        return None
    out = {}
    for n, first in entries[0].items():
        rows = [e.get(n) for e in entries]
        if not all(isinstance(r, dict) and r.get("tail") is not None for r in rows):
            out[n] = first
            continue
        est = Estimate.of([r["tail"] for r in rows])
        out[n] = {**first, "tail": est.mean, "tail_spread": est.spread,
                  "mean": _mean([r.get("mean") for r in rows])}
    return out


def _ratio_spreads(seeds: list[dict], lengths: list[str], base: str, blocked: bool
                   ) -> dict[str, float | None]:
    """Spread of ppl(n) / ppl(L) per length: over seeds, or by the paired bootstrap."""
    out: dict[str, float | None] = {}
    for n in lengths:
        if len(seeds) >= 2:
            values = [_number(s["ppl"].get(n)) for s in seeds]
            bases = [_number(s["ppl"].get(base)) for s in seeds]
            ok = all(v is not None for v in values + bases) and all(bases)
            out[n] = Estimate.of([v / b for v, b in zip(values, bases)]).spread if ok else None
            continue
        top, bottom = (bootstrap_samples(seeds[0], n, blocked),
                       bootstrap_samples(seeds[0], base, blocked))
        out[n] = (Estimate.of(top / bottom).spread if top is not None and bottom is not None
                  and top.shape == bottom.shape else None)
    return out


def aggregate(seeds: list[dict], head: dict, blocked: bool = True) -> dict:
    """One run's results.json entry: ``head`` (encoding, scaling, options, ...) plus the
    mean and spread over its ``seeds`` entries (sorted by seed); ``blocked`` as in
    :func:`~posenc.lab.claims.stats.bootstrap_samples`."""
    seeds = sorted(seeds, key=lambda s: s["seed"])
    lengths = list(seeds[0].get("ppl", {}))
    ppl, spread = {}, {}
    for n in lengths:
        est = ppl_estimate(seeds, n, blocked)
        if est is None:       # a note (n/a) or nan in some seed: keep the first such value
            ppl[n] = next(s["ppl"][n] for s in seeds if _number(s["ppl"].get(n)) is None)
            spread[n] = None
        else:
            ppl[n], spread[n] = est.mean, est.spread
    return {**head, "ppl": ppl, "ppl_spread": spread,
            "ratio_spread": _ratio_spreads(seeds, lengths, str(head.get("train_len")), blocked),
            "spread_kind": SEEDS if len(seeds) >= 2 else BOOTSTRAP,
            "train_tokens_per_s": _mean([s.get("train_tokens_per_s") for s in seeds]),
            "final_loss": _mean([s.get("final_loss") for s in seeds]),
            "curve": _mean_curve([s.get("curve") for s in seeds]),
            "entropy": _mean_entropy([s.get("entropy") for s in seeds]),
            "run_dir": seeds[0].get("run_dir"), "seeds": seeds}
