"""One comparison per corpus (code, prose, a user's path) and a report across them.

:func:`run_corpora` runs the same :class:`~posenc.lab.compare.presets.CompareConfig` on each corpus
in its own folder ``OUT/<corpus>`` (each a full comparison on the study core: resumable,
with its own results.json, report and plots), then writes ``OUT/report.md`` and
``OUT/index.html``: every claim's verdict per corpus and its status across corpora
(:func:`across`), and the papers' numbers beside each corpus's (:mod:`posenc.lab.claims.papers`).

A claim **holds on both** (every) corpora when it is supported on each; it **fails on all**
when it is not supported on each; it is **corpus-dependent** when it is supported on some
corpora and not on others (decided both ways, or decided on one and within noise on the
other: the numbers of each are printed); otherwise it is **inconclusive**. The noise rules
are the single comparison's (:mod:`posenc.lab.claims.evidence`); a verdict from one seed is marked
provisional.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from ...data.corpora import resolve_corpus
from ...runio import atomic_write
from ...study import API_NAMES, NOT_SUPPORTED, SUPPORTED, Verdict, markdown_table
from ...study.ray_units import RayCluster
from ..claims.claims import check_claims
from ..claims.evidence import Runs
from ..claims.handicaps import (
    handicap_lines,
    handicap_preamble,
    handicap_tag,
    shape_handicaps,
    verdict_handicaps,
)
from ..claims.papers import papers_section
from ..report.markdown_html import html_page, markdown_to_html
from ..report.report import verdict_text
from .presets import CompareConfig
from .study import CompareOutcome, run_compare

HOLDS, FAILS, DEPENDS, UNDECIDED = ("holds on all corpora", "fails on all corpora",
                                    "corpus-dependent", "inconclusive")


@dataclass(frozen=True)
class CorporaOutcome:
    """Each corpus's comparison, and the report across them."""

    out_dir: Path
    outcomes: dict[str, CompareOutcome]
    report: Path


def corpus_folder(corpus: str) -> str:
    """The folder under OUT of one corpus: its name, or a path's last part."""
    kind, _ = resolve_corpus(corpus)
    return corpus if kind == "name" else Path(corpus).name or "data"


def corpus_data(corpus: str) -> str | None:
    """``train.data`` for a corpus name: None (the standard library) for code."""
    return None if corpus == "code" else corpus


def across(verdicts: Sequence[str]) -> str:
    """A claim's status across corpora from its verdict on each (module docstring)."""
    if verdicts and all(v == SUPPORTED for v in verdicts):
        return HOLDS
    if verdicts and all(v == NOT_SUPPORTED for v in verdicts):
        return FAILS
    return DEPENDS if SUPPORTED in verdicts else UNDECIDED


def claims_across(results: Mapping[str, dict]) -> list[tuple[str, str, dict[str, Verdict]]]:
    """(claim, status across corpora, {corpus: Verdict}) for every claim."""
    per = {corpus: check_claims(r) for corpus, r in results.items()}
    out = []
    for i, first in enumerate(next(iter(per.values()))):
        each = {corpus: verdicts[i] for corpus, verdicts in per.items()}
        out.append((first.claim, across([v.verdict for v in each.values()]), each))
    return out


def render_corpora_report(results: Mapping[str, dict]) -> str:
    """report.md across corpora for {corpus: a comparison's results.json dict}."""
    seeds = {c: int(r.get("config", {}).get("seeds", 1)) for c, r in results.items()}
    one_seed = any(n < 2 for n in seeds.values())
    names = list(results)
    out = ["# Claims across corpora", "",
           "The same comparison (preset, model, budget, seeds) on each corpus: "
           + "; ".join(f"[{c}]({corpus_folder(c)}/index.html) "
                       f"(`{r.get('corpus', {}).get('name')}`, {seeds[c]} seed(s))"
                       for c, r in results.items()) + ".",
           "",
           f"Status: **{HOLDS}** = supported on each corpus; **{FAILS}** = not supported on "
           f"each; **{DEPENDS}** = supported on some and not on others (the numbers of each "
           f"follow); **{UNDECIDED}** otherwise. Verdicts use each comparison's noise rules."
           + (" A verdict from one seed rests on evaluation noise only and is provisional."
              if one_seed else ""), ""]
    rows = []
    claims = claims_across(results)
    handicaps = shape_handicaps(next(iter(results.values())).get("config") or {})
    touched = [verdict_handicaps(next(iter(each.values())).rule, handicaps)
               for _, _, each in claims]
    out += handicap_preamble(handicaps)
    for i, ((claim, status, each), hit) in enumerate(zip(claims, touched), 1):
        rows.append([str(i), claim, f"**{status}**" + handicap_tag(hit)]
                    + [verdict_text(each[c].verdict, seeds[c] < 2) for c in names])
    out += markdown_table(["#", "claim", "across corpora"] + names, rows) + [""]
    for i, ((claim, status, each), hit) in enumerate(zip(claims, touched), 1):
        out.append(f"{i}. **{claim}** ({next(iter(each.values())).source}): {status}.")
        out += [f"   {c}: {v.verdict}; {v.evidence}." for c, v in each.items()]
        out += handicap_lines(hit, handicaps)
    out += [""] + papers_section({c: Runs(r) for c, r in results.items()}) + [""]
    return "\n".join(out)


def run_corpora(cfg: CompareConfig, out_dir: Path, corpora: Sequence[str], *,
                overwrite: bool = False, progress: bool = True, atlas: bool = True,
                names: Mapping[str, str] = API_NAMES, workers: int = 1,
                cluster: RayCluster | None = None) -> CorporaOutcome:
    """Run ``cfg`` on each of ``corpora`` (``code``, ``prose`` or a path) into
    ``out_dir/<corpus>`` (:func:`run_compare`, with ``workers`` or ``cluster``), then write the report
    across them."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    outcomes = {}
    for corpus in corpora:
        outcomes[corpus] = run_compare(
            replace(cfg, train=replace(cfg.train, data=corpus_data(corpus))),
            out_dir / corpus_folder(corpus),
            overwrite=overwrite, progress=progress, atlas=atlas, names=names,
            workers=workers, cluster=cluster)
    results = {corpus_folder(c): o.results for c, o in outcomes.items()}
    text = render_corpora_report(results)
    report = out_dir / "report.md"
    atomic_write(report, text.encode())
    atomic_write(out_dir / "index.html",
                 html_page("posenc compare: claims across corpora",
                           markdown_to_html(text)).encode())
    return CorporaOutcome(out_dir, outcomes, report)
