"""The context-extension study (``posenc extend``) on the study core.

:class:`ExtendStudy` is a :class:`posenc.study.Study`: ``prepare`` checks every option, loads
the model and the text once and writes nothing; the plan has one unit per perplexity point
(a method at one length), one per passkey cell (a method at one length and depth), one that
files a method's finished row, and one per fine-tuned row (fine-tune, measure, restore the
weights); :func:`posenc.study.run_study` saves results.json after each unit, so a kill loses at
most the unit in progress and the next call resumes. Each unit extends the model and restores
it, so every unit starts from the pretrained model.

results.json (schema 1) holds ``setting`` (what the caller asked for: compared on resume),
``methods`` (finished rows, in method order), ``partial`` (the points and cells of unfinished
rows), ``config``, ``n_tokens``, ``native_context``, ``data``, ``source`` and ``notes``.
A results.json of an older posenc (no kind, schema 0) is recognised, so overwrite may
replace it, but not resumed: it did not record its settings.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ..encodings.checks import require_choice
from ..errors import UserError
from ..methods import parse_method_spec
from ..study import (
    API_NAMES,
    RunDirectory,
    Study,
    Unit,
    decode,
)
from ..study.settings import settings_difference, short
from ..study.study import InOrder, UnitExecutor
from .extend import extend, hf_rope_parameters, make_extension, restore
from .extend_kind import EXTEND_KIND, render_extension
from .extend_request import ExtendRequest, ExtendRuntime
from .extension_settings import (
    ExtensionSettings,
    config_dict,
    default_lengths,
    row_names,
    validate_settings,
)
from .finetune import finetune
from .load import MODEL_DTYPES
from .measure import PeakMemory, forward_bytes, n_windows, perplexity_vs_length
from .passkey import PasskeyGrid, passkey_cell


class ExtendStudy(Study):
    """``run_study(ExtendStudy(request, runtime), out_dir)``: see the module docstring.
    ``warn(text)`` is told what the report notes (the CLI prints it on stderr). ``prepare``
    loads the model, its tokenizer and the text once; each unit returns what it measured
    and :meth:`commit` files it."""

    kind = EXTEND_KIND

    def __init__(self, request: ExtendRequest, runtime: ExtendRuntime = ExtendRuntime(),
                 names: Mapping[str, str] = API_NAMES,
                 warn: Callable[[str], None] | None = None) -> None:
        self.request, self.runtime, self.names, self.warn = request, runtime, names, warn
        self.model = self.tokenizer = self.tokens = self.config = self.saved_weights = None

    # ------------------------------------------------------------ settings
    def incomparable(self, existing: dict) -> str | None:
        return settings_difference(existing.get("setting"), self.request.setting(), "it was written by an older posenc that did not record its settings")

    # ------------------------------------------------------------ prepare
    def prepare(self, existing: dict | None) -> dict:
        """Check every option, load the model and the text; write nothing."""
        import torch

        from .load import load_model, resolve_model
        from .measure import corpus_texts, token_stream, tokens_needed

        req, rt = self.request, self.runtime
        self._check_before_loading()
        resolve_model(req.model)                   # a bad path or GGUF fails before loading
        texts, data_info = corpus_texts(req.data)
        if rt.threads is not None:
            torch.set_num_threads(rt.threads)
        loaded = load_model(req.model, dtype=getattr(torch, req.dtype),
                            gguf_cache=rt.gguf_cache, device=rt.device,
                            device_map=rt.device_map)
        model, tok, native = loaded.model, loaded.tokenizer, loaded.native_context
        lengths = tuple(req.lengths or default_lengths(req.original or native))
        config = req.config(lengths, rt.memory_limit)
        validate_settings(model, config, tok)
        if rt.save:        # refuse what plain transformers cannot express before any compute
            method = self._scaled()[0]
            hf_rope_parameters(make_extension(model.config, method, req.factor, req.original,
                                              **req.options))
        need = tokens_needed(lengths, req.stride, req.eval_windows)
        if config.finetune is not None:
            need = max(need, config.finetune.length)
        tokens = token_stream(tok, texts, need)
        notes = self._notes(config, native)
        derived = {"model": req.model, "native_context": native, "data": data_info,
                   "source": {"kind": loaded.source.kind, "location": loaded.source.location,
                              "gguf_file": loaded.source.gguf_file},
                   "config": config_dict(config), "n_tokens": int(tokens.numel()),
                   "notes": notes}
        results = {"setting": req.setting(), "methods": {}, "partial": {}}
        if existing is not None:
            results = decode(existing)
            for key in ("n_tokens", "native_context", "data"):
                if results.get(key) != derived[key]:
                    raise UserError(
                        f"the output directory holds a posenc extend study whose {key} was "
                        f"{short(results.get(key))} and is {short(derived[key])} now (the "
                        f"model or text changed); pass {self.names['overwrite']} to start "
                        "again")
        results.update(derived)
        for note in notes:
            if self.warn is not None:
                self.warn(note)
        self.model, self.tokenizer, self.tokens, self.config = model, tok, tokens, config
        if config.finetune is not None:
            self.saved_weights = {k: v.detach().clone() for k, v in model.state_dict().items()}
        return results

    def _check_before_loading(self) -> None:
        """Every option that can be checked without the model."""
        req, rt = self.request, self.runtime
        if rt.threads is not None and rt.threads < 1:
            raise UserError(f"threads must be >= 1, got {rt.threads}")
        for method in req.methods:
            parse_method_spec(method)
        require_choice("dtype", req.dtype, MODEL_DTYPES)
        stand_in = req.lengths or (max(2, req.stride or 2, req.finetune_len or 2),)
        req.config(stand_in, rt.memory_limit)      # lengths, windows, passkey, fine-tune
        if rt.save:
            if req.finetune_steps or len(self._scaled()) != 1:
                raise UserError(f"{self.names['save']} saves one extended model: give one "
                                "method besides 'none' and no "
                                f"{self.names['finetune_steps']}")
            if Path(rt.save).exists() and (not Path(rt.save).is_dir()
                                           or any(Path(rt.save).iterdir())):
                raise UserError(f"{self.names['save']} directory {rt.save} is not empty")

    def _scaled(self) -> list[str]:
        return [m for m in self.request.methods
                if parse_method_spec(m).method.factor_rule != "none"]

    def _notes(self, config: ExtensionSettings, native: int) -> list[str]:
        """What the report must say about the settings (also told to ``warn``)."""
        notes = []
        base = config.original or native
        what = "the original length you set" if config.original else "the native context"
        if max(config.lengths + config.passkey_lengths) <= base:
            notes.append(f"no length exceeds {what} ({base} tokens): nothing is "
                         f"extended here; give lengths above {base} to measure extension")
        elif config.original and config.original < native \
                and max(config.lengths + config.passkey_lengths) <= native:
            notes.append(f"every length is inside the model's native context ({native} "
                         "tokens): 'none' is never past what the model was trained on, so "
                         f"this measures what each method costs when asked to extend from "
                         f"{config.original} tokens, not whether it rescues the model beyond "
                         "its real context")
        if config.eval_windows == 1:
            notes.append("one window per length: perplexity has no spread; use 5 or more "
                         "windows for a ± that means something")
        for method in config.methods:
            cls = parse_method_spec(method).method
            if cls.kind == "structural" and not self.request.finetune_steps:
                notes.append(f"{method} is measured without its recalibration "
                             f"({cls.recalibration}); {self.names['finetune_steps']}, with the "
                             "fine-tune length set to the original length, gives it a "
                             "recalibrated row (posenc.hf.recalibrate from Python)")
        return notes

    # ------------------------------------------------------------ plan
    def plan(self, results: dict) -> list[Unit]:
        config, done, partial = self.config, results["methods"], results["partial"]
        units = []
        for method in config.methods:
            names = row_names(self.model, config, method)
            base, state = names[0], partial.get(names[0], {})
            if base not in done:
                for n in config.lengths:
                    if str(n) not in state.get("ppl", {}):
                        units.append(Unit(("ppl", method, base, n), f"{base} perplexity at {n}",
                                          self._windows(n)))
                for (i, j), depth, n in self._cells():
                    if f"{i}:{j}" not in state.get("passkey", {}):
                        units.append(Unit(("passkey", method, base, i, j),
                                          f"{base} passkey at {n}, depth {depth:g}",
                                          config.passkey_trials))
                units.append(Unit(("row", method, base), f"{base} done", 0))
            if len(names) > 1 and names[1] not in done:
                weight = config.finetune.steps + sum(self._windows(n) for n in config.lengths) \
                    + len(self._cells()) * config.passkey_trials
                units.append(Unit(("finetune", method, names[1]),
                                  f"{names[1]}: fine-tune and measure", weight))
        return units

    def _windows(self, length: int) -> int:
        return n_windows(int(self.tokens.numel()), length, self.config.stride,
                         self.config.eval_windows)

    def _cells(self) -> list[tuple[tuple[int, int], float, int]]:
        """((depth index, length index), depth, length) of every passkey cell."""
        config = self.config
        if not config.passkey:
            return []
        return [((i, j), d, n) for i, d in enumerate(config.passkey_depths)
                for j, n in enumerate(config.passkey_lengths)]

    # ------------------------------------------------------------ run
    def executor(self, units: Sequence[Unit]) -> UnitExecutor:
        """Here in order, or with ``runtime.cluster`` every point, cell and fine-tuned row a
        Ray task on the prepared model (shipped once per worker; a row's bookkeeping unit
        runs here); a point or cell asks for a forward's estimated memory at its length,
        plus the weights."""
        if self.runtime.cluster is None:
            return InOrder(self)
        if self.runtime.device_map is not None:
            raise UserError("a model split over devices (device_map) runs in one process; "
                            "leave out the device map to run on a Ray cluster")
        from ..study.ray_units import study_units_on
        shipped = copy.copy(self)
        shipped.names, shipped.warn = dict(self.names), None
        param = next(self.model.parameters())
        weights = sum(p.numel() * p.element_size() for p in self.model.parameters())
        config = self.config

        def memory(unit: Unit) -> int | None:
            length = unit.key[3] if unit.key[0] == "ppl" else \
                config.passkey_lengths[unit.key[4]] if unit.key[0] == "passkey" else None
            return None if length is None else \
                weights + forward_bytes(self.model.config, length, param.dtype)
        return study_units_on(self, shipped, units, self.runtime.cluster, self.runtime.device,
                              memory, here=lambda unit: unit.key[0] == "row")

    def run_unit(self, unit: Unit, advance: Callable[[int], None]) -> dict:
        """Measure one unit on the extended model (restored after): ``{"extension", ...}``
        with a perplexity ``point`` or a passkey ``cell`` and the memory it took
        (``peak``, ``start``), or a fine-tuned ``row``."""
        what, method, row = unit.key[:3]
        config = self.config
        ext = extend(self.model, method, config.factor_for(method), config.original,
                     **config.options_for(method))
        try:
            if what == "finetune":
                return {"row": self._finetuned_row(ext, advance)}
            if what == "row":
                return {"extension": ext.as_dict()}
            with PeakMemory() as mem:
                if what == "ppl":
                    point = perplexity_vs_length(
                        self.model, self.tokens, [unit.key[3]], config.stride,
                        config.eval_windows, advance, config.memory_limit,
                        seed=config.seed)[0]
                    measured = {"point": asdict(point)}
                else:
                    i, j = unit.key[3:]
                    measured = {"cell": passkey_cell(
                        self.model, self.tokenizer, config.passkey_lengths[j],
                        config.passkey_depths[i], (i, j), config.passkey_trials,
                        config.seed, advance)}
        finally:
            restore(self.model)
        return {"extension": ext.as_dict(), **measured, "peak": mem.peak, "start": mem.start}

    def commit(self, results: dict, unit: Unit, result: dict) -> None:
        """File a point or cell under its row's ``partial`` state, a finished row (from that
        state) or a fine-tuned row under ``methods``, kept in method order."""
        what, _, row = unit.key[:3]
        config = self.config
        if what == "finetune":
            results["methods"][row] = result["row"]
        elif what == "row":
            state = results["partial"].pop(row, None) or _new_state(result["extension"])
            results["methods"][row] = self._row(state)
        else:
            state = results["partial"].setdefault(row, _new_state(result["extension"]))
            if what == "ppl":
                state["ppl"][str(result["point"]["length"])] = result["point"]
            else:
                i, j = unit.key[3:]
                state["passkey"][f"{i}:{j}"] = result["cell"]
            state["peak_rss_bytes"] = max(state["peak_rss_bytes"] or 0, result["peak"])
            if state["rss_before_bytes"] is None:
                state["rss_before_bytes"] = result["start"]
        order = [n for m in config.methods for n in row_names(self.model, config, m)]
        results["methods"] = {n: results["methods"][n] for n in order
                              if n in results["methods"]}

    def _row(self, state: dict) -> dict:
        """A finished row from the points and cells of ``state``."""
        config = self.config
        grid = None
        if config.passkey:
            accuracy = [[state["passkey"][f"{i}:{j}"] for j in range(len(config.passkey_lengths))]
                        for i in range(len(config.passkey_depths))]
            grid = asdict(PasskeyGrid(config.passkey_lengths, config.passkey_depths,
                                      config.passkey_trials,
                                      tuple(tuple(r) for r in accuracy)))
            grid["accuracy_by_length"] = {
                str(n): sum(r[j] for r in accuracy) / len(config.passkey_depths)
                for j, n in enumerate(config.passkey_lengths)}
        return {"extension": state["extension"],
                "ppl": [state["ppl"][str(n)] for n in config.lengths], "passkey": grid,
                "peak_rss_bytes": state["peak_rss_bytes"],
                "rss_before_bytes": state["rss_before_bytes"]}

    def _finetuned_row(self, ext: Any, advance: Callable[[int], None]) -> dict:
        """Fine-tune the extended model, measure every point and cell, restore the weights."""
        config = self.config
        try:
            losses = finetune(self.model, self.tokens, config.finetune, advance)
            state = _new_state(ext.as_dict())
            with PeakMemory() as mem:
                for point in perplexity_vs_length(self.model, self.tokens, config.lengths,
                                                  config.stride, config.eval_windows, advance,
                                                  config.memory_limit, seed=config.seed):
                    state["ppl"][str(point.length)] = asdict(point)
                for (i, j), depth, n in self._cells():
                    state["passkey"][f"{i}:{j}"] = passkey_cell(
                        self.model, self.tokenizer, n, depth, (i, j), config.passkey_trials,
                        config.seed, advance)
            state["peak_rss_bytes"], state["rss_before_bytes"] = mem.peak, mem.start
        finally:
            self.model.load_state_dict(self.saved_weights)
        return {**self._row(state), "finetune": {**asdict(config.finetune), "losses": losses}}

    # ------------------------------------------------------------ report
    def render(self, results: dict, directory: RunDirectory, final: bool) -> list[Path]:
        return render_extension(results, directory, final)

    def save_extended(self, path: str | Path) -> Path:
        """Save the model extended by the study's one scaled method (``runtime.save``)."""
        from .load import save_extended
        req = self.request
        extend(self.model, self._scaled()[0], req.factor, req.original, **req.options)
        try:
            return save_extended(self.model, path, self.tokenizer)
        finally:
            restore(self.model)

    def export_gguf(self, path: str | Path) -> Path:
        """Write the model extended by the study's one scaled method as GGUF (a GGUF source
        keeps its tensors; see :mod:`posenc.hf.gguf_export`)."""
        from .gguf_export import write_gguf
        from .load import resolve_model
        req, scaled = self.request, self._scaled()
        source = resolve_model(req.model)
        gguf_file = Path(source.location) / source.gguf_file if source.kind == "gguf" \
            else None
        if scaled:
            extend(self.model, scaled[0], req.factor, req.original, **req.options)
        try:
            return write_gguf(self.model, path, source=gguf_file)
        finally:
            if scaled:
                restore(self.model)


def _new_state(extension: dict) -> dict:
    return {"extension": extension, "ppl": {}, "passkey": {}, "peak_rss_bytes": None,
            "rss_before_bytes": None}

