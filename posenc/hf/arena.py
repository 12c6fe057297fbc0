"""The extension arena (``posenc arena``): methods x lengths x needle depths on one model.

Every method of the registry :mod:`posenc.methods` (given as a spec, checked by
:func:`~posenc.methods.parse_method_spec`) extends the model from ``original`` tokens by
``factor``; each is measured at every length on three tasks over real text
(:mod:`posenc.hf.arena_tasks`, :mod:`posenc.data.texts`):

- needle in a haystack: ``needles`` facts at each depth, exact match of the answer;
- passkey retrieval (:mod:`posenc.hf.passkey`): ``passkey_trials`` keys at each depth;
- sliding-window perplexity of the text (:func:`posenc.hf.measure.perplexity_vs_length`),
  ``eval_windows`` windows per length;
- RULER's task families (:mod:`posenc.hf.ruler`: multi-key, multi-value and multi-query
  needles, variable tracking, common and frequent words), ``ruler_samples`` prompts per
  length, answered by greedy decoding, at ``ruler_lengths`` (None: the arena's lengths).

:class:`ArenaStudy` is a :class:`posenc.study.Study`: one unit per needle cell, passkey cell,
perplexity point and RULER cell (a method at one length, and depth or family), so a kill loses
at most one cell and the same call resumes. Each unit extends the model and restores it. results.json (schema 1)
holds ``setting`` (compared on resume), ``needle`` and ``passkey`` (method -> "length:depth
index" -> a 0/1 per needle or key), ``ppl`` (method -> length -> point), ``ruler`` (family ->
method -> length -> a score in [0, 1] per sample; absent in older files), ``extensions``
(what each method did), ``peak_rss_bytes`` (per method), ``model``, ``native_context``,
``original``, ``lengths``, ``ruler_lengths``, ``methods`` (``all`` expanded), ``text``,
``n_tokens`` and ``notes``; the report and verdicts are :mod:`posenc.hf.arena_report`.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ..errors import UserError
from ..methods import list_methods, method_class, parse_method_spec
from ..study import (
    API_NAMES,
    RESULTS,
    RunDirectory,
    Study,
    StudyKind,
    Unit,
    decode,
    register_kind,
)
from ..study.placement import placement_markdown
from ..study.settings import settings_difference, short
from ..study.study import InOrder, UnitExecutor
from .arena_checks import check_request, ruler_lengths_of
from .arena_fields import check_arena_results
from .arena_report import report_markdown, sample_notes, write_figures
from .arena_request import ArenaRequest, ArenaRuntime
from .arena_tasks import Haystack, min_needle_length, needle_hits, passkey_hits
from .extend import extend, make_extension, restore
from .measure import (
    PeakMemory,
    check_memory,
    forward_bytes,
    n_windows,
    perplexity_vs_length,
    tokens_needed,
)
from .passkey import min_length
from .ruler import RulerText, ruler_sample
from .ruler.measure import ruler_scores


def render_arena(results: dict, directory: RunDirectory, final: bool = True) -> list[Path]:
    """report.md, and when ``final`` the needle and passkey heat maps."""
    paths = [directory.path / RESULTS,
             directory.write("report.md", report_markdown(results) + placement_markdown(results))]
    if final:
        paths += write_figures(results, directory)
    return paths


ARENA_KIND = register_kind(StudyKind(
    name="arena", schema=1, command="posenc arena",
    outputs=(RESULTS, "report.md", "needle.png", "passkey.png", "ruler.png"),
    description="posenc arena study",
    redraw=lambda results, directory: redraw_arena(results, directory)))


def redraw_arena(results: dict, directory: RunDirectory) -> list[Path]:
    """``posenc plot``: report.md and the heat maps again from a results.json (checked)."""
    check_arena_results(results, directory.path / RESULTS)
    return render_arena(decode(results), directory)[1:]


class ArenaStudy(Study):
    """``run_study(ArenaStudy(request, runtime), out_dir)``: see the module docstring.
    ``prepare`` loads the model, its tokenizer and the haystack once; each unit returns what
    it measured and :meth:`commit` files it."""

    kind = ARENA_KIND

    def __init__(self, request: ArenaRequest, runtime: ArenaRuntime = ArenaRuntime(),
                 names: Mapping[str, str] = API_NAMES,
                 warn: Callable[[str], None] | None = None) -> None:
        self.request, self.runtime, self.names, self.warn = request, runtime, names, warn
        self.model = self.tokenizer = self.haystack = None
        self.methods: tuple[str, ...] = ()
        self.lengths: tuple[int, ...] = ()
        self.ruler_lengths: tuple[int, ...] = ()
        self.ruler_text: RulerText | None = None
        self.original = 0
        #: the model's own weights, and each structural method's recalibrated ones
        self._weights: dict | None = None
        self._recalibrated: dict[str, dict] = {}

    def check_existing(self, existing: dict, path: Path) -> None:
        for field in check_arena_results(existing, path, repair=True):
            if self.warn is not None:
                self.warn(f"{path}: {field} is broken and is measured again")

    def incomparable(self, existing: dict) -> str | None:
        return settings_difference(existing.get("setting"), self.request.setting())

    # ------------------------------------------------------------ prepare
    def prepare(self, existing: dict | None) -> dict:
        """Check every option, load the model and the text; write nothing."""
        import torch

        from ..data.texts import load_texts
        from .load import load_model, resolve_model

        req, rt = self.request, self.runtime
        check_request(req)
        if rt.threads is not None and rt.threads < 1:
            raise UserError(f"threads must be >= 1, got {rt.threads}")
        resolve_model(req.model)
        texts = load_texts(req.text)
        if rt.threads is not None:
            torch.set_num_threads(rt.threads)
        loaded = load_model(req.model, dtype=getattr(torch, req.dtype),
                            gguf_cache=rt.gguf_cache, device=rt.device)
        model, tok, native = loaded.model, loaded.tokenizer, loaded.native_context
        original = req.original or native
        lengths = tuple(req.lengths or sorted({round(m * original) for m in req.multiples}
                                              | {round(req.factor * original)}))
        methods, skipped = self._methods(model.config, original)
        ruler_lengths, dropped = ruler_lengths_of(req, lengths, original)
        shortest = max(min_needle_length(tok, req.needles, req.seed),
                       min_length(tok) if req.passkey_trials else 0)
        if min(lengths) < shortest:
            raise UserError(f"length {min(lengths)} is shorter than a prompt without haystack "
                            f"({shortest} tokens); give longer lengths")
        param = next(model.parameters())
        check_memory(model.config, max(lengths), param.dtype, rt.memory_limit, param.device)
        haystack = Haystack.of(tok, texts.documents)
        ruler_text = RulerText.of(tok, texts.documents, haystack)
        for family in req.tasks if ruler_lengths else ():
            ruler_sample(family, tok, ruler_text, min(ruler_lengths), 0, req.seed)
        if ruler_lengths:
            check_memory(model.config, max(ruler_lengths), param.dtype, rt.memory_limit,
                         param.device)
        need = tokens_needed(lengths, None, req.eval_windows) if req.eval_windows else 0
        if haystack.tokens.numel() < need:
            raise UserError(f"the text holds {haystack.tokens.numel()} tokens, fewer than the "
                            f"{need} that {req.eval_windows} perplexity windows of {max(lengths)} "
                            "need; give more text, fewer windows or shorter lengths")
        notes = _notes(original, native, lengths, skipped) + recalibration_notes(methods) + \
            sample_notes(req.setting()) + dropped
        derived = {"model": req.model, "native_context": native, "original": original,
                   "lengths": list(lengths), "ruler_lengths": list(ruler_lengths),
                   "methods": list(methods),
                   "text": texts.info(), "n_tokens": int(haystack.tokens.numel()),
                   "notes": notes}
        results = {"setting": req.setting(), "needle": {}, "passkey": {}, "ppl": {},
                   "ruler": {}, "extensions": {}, "peak_rss_bytes": {}}
        if existing is not None:
            results = decode(existing)
            results.setdefault("ruler", {})
            for key in ("native_context", "text", "n_tokens", "lengths", "methods"):
                if results.get(key) != derived[key]:
                    raise UserError(f"the output directory holds a posenc arena study whose "
                                    f"{key} was {short(results.get(key))} and is "
                                    f"{short(derived[key])} now (the model, the text or "
                                    "the methods of 'all' changed); "
                                    f"pass {self.names['overwrite']} to start again")
        results.update(derived)
        for note in notes:
            if self.warn is not None:
                self.warn(note)
        self.model, self.tokenizer, self.haystack = model, tok, haystack
        self.methods, self.lengths, self.original = methods, lengths, original
        self.ruler_text, self.ruler_lengths = ruler_text, ruler_lengths
        return results

    def _methods(self, config: Any, original: int) -> tuple[tuple[str, ...], list[str]]:
        """The methods to run and, for ``all``, those left out (they need more options)."""
        req = self.request
        named = [m for m in req.methods if m != "all"]
        for m in named:
            make_extension(config, m, self._factor(m), original)
        if "all" not in req.methods:
            return tuple(req.methods), []
        kept, skipped = [], []
        for m in list_methods():
            if method_class(m).kind == "temperature" or m in named:
                continue
            if method_class(m).kind == "structural":
                skipped.append(f"{m} (it needs a recalibration; name it: --methods all,{m})")
                continue
            try:
                make_extension(config, m, self._factor(m), original)
            except UserError as err:
                skipped.append(f"{m} ({err})")
                continue
            kept.append(m)
        return tuple(kept + named), skipped

    def _factor(self, method: str) -> float | None:
        return None if parse_method_spec(method).method.factor_rule == "none" \
            else self.request.factor

    # ------------------------------------------------------------ plan
    def plan(self, results: dict) -> list[Unit]:
        req, units = self.request, []
        for method in self.methods:
            for n in self.lengths:
                for i, depth in enumerate(req.depths):
                    if f"{n}:{i}" not in results["needle"].get(method, {}):
                        units.append(Unit(("needle", method, n, i),
                                          f"{method} needles at {n}, depth {depth:g}",
                                          req.needles))
                    if req.passkey_trials and \
                            f"{n}:{i}" not in results["passkey"].get(method, {}):
                        units.append(Unit(("passkey", method, n, i),
                                          f"{method} passkey at {n}, depth {depth:g}",
                                          req.passkey_trials))
                if req.eval_windows and str(n) not in results["ppl"].get(method, {}):
                    weight = n_windows(int(self.haystack.tokens.numel()), n, None, req.eval_windows)
                    units.append(Unit(("ppl", method, n), f"{method} perplexity at {n}",
                                      weight))
            for n in self.ruler_lengths:
                for family in req.tasks:
                    if str(n) not in results["ruler"].get(family, {}).get(method, {}):
                        units.append(Unit(("ruler", method, n, family),
                                          f"{method} RULER {family} at {n}",
                                          req.ruler_samples))
        return units

    # ------------------------------------------------------------ run
    def executor(self, units: Sequence[Unit]) -> UnitExecutor:
        """Here in order, or with ``runtime.cluster`` every cell and point a Ray task that
        runs on the prepared model, shipped once per worker; it asks for a forward's
        estimated memory at the unit's length, plus the weights."""
        if self.runtime.cluster is None:
            return InOrder(self)
        from ..study.ray_units import study_units_on
        shipped = copy.copy(self)
        shipped.names, shipped.warn = dict(self.names), None
        param = next(self.model.parameters())
        weights = sum(p.numel() * p.element_size() for p in self.model.parameters())
        return study_units_on(
            self, shipped, units, self.runtime.cluster, self.runtime.device,
            lambda unit: weights + forward_bytes(self.model.config, unit.key[2], param.dtype))

    def run_unit(self, unit: Unit, advance: Callable[[int], None]) -> dict:
        """Measure one cell or point on the extended model (restored after): ``{"extension",
        "value", "peak"}`` (``value``: the hits of a needle or passkey cell, the scores of a
        RULER cell, or a perplexity point)."""
        what, method, length = unit.key[:3]
        req = self.request
        ext = extend(self.model, method, self._factor(method), self.original)
        try:
            self._recalibrate(method)
            with PeakMemory() as mem:
                if what == "needle":
                    value = needle_hits(self.model, self.tokenizer, self.haystack, length,
                                        req.depths[unit.key[3]], req.needles, req.seed,
                                        advance)
                elif what == "passkey":
                    i = unit.key[3]
                    value = passkey_hits(self.model, self.tokenizer, length, req.depths[i],
                                         (i, self.lengths.index(length)), req.passkey_trials,
                                         req.seed, advance)
                elif what == "ruler":
                    value = ruler_scores(self.model, self.tokenizer, self.ruler_text,
                                         unit.key[3], length, req.ruler_samples, req.seed,
                                         advance)
                else:
                    value = asdict(perplexity_vs_length(
                        self.model, self.haystack.tokens, [length], None, req.eval_windows,
                        advance, self.runtime.memory_limit, seed=req.seed)[0])
        finally:
            restore(self.model)
            if self._weights is not None:          # a recalibration changed the weights
                self.model.load_state_dict(self._weights)
        return {"extension": ext.as_dict(), "value": value, "peak": mem.peak}

    def _recalibrate(self, method: str) -> None:
        """A structural method's recalibration (DroPE): run once per method at the original
        length on the haystack's text (the budget its class declares), its weights kept for
        the method's later units; the model's own weights come back after each unit."""
        from .recalibration import recalibrate
        if parse_method_spec(method).method.kind != "structural":
            return
        if self._weights is None:
            self._weights = {k: v.detach().clone() for k, v in self.model.state_dict().items()}
        if method not in self._recalibrated:
            recalibrate(self.model, self.haystack.tokens, seed=self.request.seed)
            self._recalibrated[method] = {k: v.detach().clone()
                                          for k, v in self.model.state_dict().items()}
        else:
            self.model.load_state_dict(self._recalibrated[method])

    def commit(self, results: dict, unit: Unit, result: dict) -> None:
        """File a cell under ``needle`` or ``passkey`` ("length:depth index"), a point under
        ``ppl`` (length), RULER scores under ``ruler`` (family, method, length), what the
        method did and its peak memory."""
        what, method, length = unit.key[:3]
        if what == "ruler":
            family = results["ruler"].setdefault(unit.key[3], {})
            family.setdefault(method, {})[str(length)] = result["value"]
        else:
            cell = str(length) if what == "ppl" else f"{length}:{unit.key[3]}"
            results[what].setdefault(method, {})[cell] = result["value"]
        results["extensions"][method] = result["extension"]
        peaks = results["peak_rss_bytes"]
        peaks[method] = max(peaks.get(method) or 0, result["peak"])

    # ------------------------------------------------------------ report
    def render(self, results: dict, directory: RunDirectory, final: bool) -> list[Path]:
        return render_arena(results, directory, final)


def recalibration_notes(methods: tuple[str, ...] | list[str]) -> list[str]:
    """One note per structural method (DroPE): the recalibration it gets before it is
    measured, and what that means for its perplexity."""
    return [f"{m} is recalibrated before it is measured ({cls.recalibration}, seed of the "
            "study) on the haystack's text itself: its perplexity of that text is not "
            "comparable with the other methods'; its needles and passkeys are"
            for m in methods for cls in [parse_method_spec(m).method]
            if cls.kind == "structural"]


def _notes(original: int, native: int, lengths: tuple[int, ...], skipped: list[str]
           ) -> list[str]:
    """What the report must say plainly about the settings (also told to ``warn``)."""
    notes = []
    if original < native:
        notes.append(f"the methods extend from an original context of {original} tokens, "
                     f"but the model was trained to {native}: 'none' is never beyond its "
                     f"trained context at these lengths (<= {max(lengths)}), so this measures "
                     "what each method costs when asked to extend from the shorter length, "
                     "not whether it rescues a model past its real context")
    if max(lengths) <= original:
        notes.append(f"no length exceeds the original context ({original} tokens): nothing "
                     "is extended here and no verdict can be reached")
    if skipped:
        notes.append("methods left out of 'all' (they need options): " + "; ".join(skipped))
    return notes

