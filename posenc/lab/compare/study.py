"""``posenc compare``: train every encoding short, test it long, write results, report, plots.

For each encoding of a :class:`~.presets.CompareConfig` and each of its seeds, with
the same data and budget: train into ``OUT/runs/<encoding>/seed<k>``
(:func:`posenc.train.loop.train`), evaluate perplexity at every length on the held-out test
split keeping every window's loss (for the bootstrap), attention entropy at modest lengths,
and for RoPE each inference-time scaling on the same weights. Then the unigram baseline, the
interleaved timing of a training step per encoding, the report and plots, and the atlas
(:func:`posenc.atlas.write_atlas`, with one trained run's learned terms and attention maps)
in ``OUT/atlas``, linked from the report and index.html.

The corpus and tokenizer are loaded once per comparison
(:func:`~posenc.lab.compare.study_data.prepare_study_data`) and every run trains on those streams.
Runs train and are evaluated on ``cfg.train.device``, which is recorded in results.json but
not compared: a comparison may grow on another device. The data is compared by content (the
corpus hash), not by the path that names it.

The comparison runs on the study core (:class:`CompareStudy`, :func:`posenc.study.run_study`;
a unit is one (encoding, seed) run). Nothing is lost on a crash: ``results.json`` is
rewritten atomically after every unit, and a second call resumes: finished (encoding, seed)
runs are kept, an interrupted training resumes from its checkpoint. A call that adds
encodings, seeds or scalings to a directory trains only what is missing; one whose settings
make the old runs incomparable is refused with the reason, unless ``overwrite``, which
removes only what a comparison writes. One process at a time writes ``out_dir`` (the run
directory's lock). A run whose training diverges (non-finite loss) is
recorded under ``failed`` in results.json and named in the report; the others go on.
With ``workers`` > 1 the runs train and are evaluated in worker processes, side by side
(:mod:`posenc.lab.compare.parallel_runs`); with a Ray ``cluster`` each (encoding, seed) is a
Ray task on whichever node has room (:mod:`posenc.lab.compare.remote_runs`), its run's files
returned to this process. Either way results.json is written in the plan's order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ...encodings.checks import require_positive_int
from ...errors import UserError
from ...eval.inference_scaling import InferenceScaling, run_label
from ...study import API_NAMES, RESULTS, RunDirectory, Study, StudyOutcome, Unit, encode, run_study
from ...study.placement import placement_markdown
from ...study.ray_units import RayCluster
from ...study.study import InOrder, UnitExecutor
from ...viz.plots import plot_all
from ..report.report import existing_links, render_index, render_report
from ..runs.baseline import baseline_entry
from ..runs.variants import takes_scaling
from .growth import incomparable_reason, merged
from .one_run import announce_run, ensure_trained, evaluate_run, run_dir_of, run_head
from .parallel_runs import GroupResult, run_group
from .presets import CompareConfig, changed_from_preset
from .progress import UnitProgress, unit_weight
from .remote_runs import write_run_files
from .results import COMPARE_KIND, aggregate
from .study_data import StudyData, prepare_study_data, study_device
from .timing import time_training_steps
from .unit_pool import PooledUnits

ATLAS = "atlas"
#: whose trained run the atlas draws (the first of these compared; else the first encoding):
#: a learned bias table shows most of what training did to positions
ATLAS_RUN_PREFERENCE = ("t5", "kerple", "fire", "alibi")
#: report.md and index.html are redrawn after a unit at most this often (seconds); the
#: results are saved after every unit, and the last unit always redraws
RENDER_EVERY_S = 20.0


@dataclass(frozen=True)
class CompareOutcome:
    """What a comparison wrote and which (encoding, seed) runs it trained now or reused."""

    out_dir: Path
    results: dict
    report: Path
    plots: tuple[Path, ...]
    trained: tuple[str, ...]
    reused: tuple[str, ...]


# ------------------------------------------------------------------ outputs
def render_outputs(directory: RunDirectory, results: dict, plots: bool = True,
                   atlas: bool = False) -> tuple[Path, list[Path]]:
    """(if ``plots``) the PNGs and (if ``atlas``) the atlas, then report.md and index.html
    (results.json is the study core's to write)."""
    out_dir = directory.path
    paths = plot_all(results, out_dir) if plots and results["runs"] else []
    if atlas:
        write_comparison_atlas(out_dir, results)
    names, links = [p.name for p in paths], existing_links(out_dir)
    text = render_report(results, names, links, changed_from_preset(results.get("config", {})))
    text += placement_markdown(results)
    report = directory.write("report.md", text)
    directory.write("index.html", render_index(results, names, links, report=text))
    return report, paths


def atlas_run(out_dir: Path, results: dict) -> Path | None:
    """The run folder the atlas draws: seed 0 (the first seed) of the preferred encoding."""
    c = results.get("config", {})
    encodings = c.get("encodings", [])
    chosen = next((e for e in ATLAS_RUN_PREFERENCE if e in encodings), None)
    chosen = chosen or (encodings[0] if encodings else None)
    seed = int((c.get("train") or {}).get("seed", 0))
    run = out_dir / run_dir_of(chosen, seed) if chosen else None
    return run if run is not None and (run / "config.json").is_file() else None


def write_comparison_atlas(out_dir: Path, results: dict) -> Path:
    """Draw the atlas into ``out_dir/atlas`` with one of the comparison's trained runs."""
    from ...atlas import write_atlas
    write_atlas(out_dir / ATLAS, run_dir=atlas_run(out_dir, results))
    return out_dir / ATLAS / "index.html"


# ------------------------------------------------------------------ the plan
def planned_runs(cfg: CompareConfig) -> list[tuple[str, str | None]]:
    """(encoding, inference scaling label or None) for every run, in report order."""
    plan = []
    for enc in cfg.encodings:
        plan.append((enc, None))
        plan += [(enc, InferenceScaling.parse(s).label) for s in cfg.scalings
                 if takes_scaling(enc, s)]
    return plan


def _check_encoding(cfg: CompareConfig, encoding: str) -> None:
    """Validate an encoding's (or variant's) TrainConfig and build its encodings as the model
    would."""
    from ...encodings import build_encoding
    model = cfg.train_config(encoding, 256).model
    for spec in {s.encoding_key(): s for s in model.layer_specs()}.values():
        build_encoding(spec.pe, n_heads=model.n_heads, head_dim=model.d_model // model.n_heads,
                       max_len=model.max_len, **spec.pe_options)


def add_seed(results: dict, cfg: CompareConfig, head: dict, entry: dict) -> None:
    """Put one seed's entry into its run (created if new), re-aggregate, keep plan order."""
    label = head["label"]
    runs = results["runs"]
    old = next((r for r in runs if run_label(r) == label), None)
    seeds = [s for s in (old or {}).get("seeds", []) if s["seed"] != entry["seed"]] + [entry]
    run = aggregate(encode(seeds), head, blocked=cfg.stride is None)
    if old is None:
        runs.append(run)
    else:
        runs[runs.index(old)] = run
    order = {pair: i for i, pair in enumerate(planned_runs(cfg))}
    runs.sort(key=lambda r: order.get((r["encoding"], r.get("inference_scaling")), len(order)))


def _done(results: dict) -> set[tuple[str, str | None, int]]:
    """(encoding, inference scaling, seed) of every evaluated seed."""
    return {(r["encoding"], r.get("inference_scaling"), s["seed"])
            for r in results["runs"] for s in r.get("seeds", [])}


def _measure_timing(cfg: CompareConfig, vocab_size: int) -> dict:
    """Interleaved step timing of every encoding."""
    from ...models import TransformerLM
    return time_training_steps(
        lambda enc: TransformerLM(cfg.train_config(enc, vocab_size).model),
        cfg.encodings, cfg.train.batch_size, cfg.train_len, vocab_size, cfg.timing_rounds)


# ------------------------------------------------------------------ the study
@dataclass(frozen=True)
class PreparedComparison:
    """What ``prepare`` made once for every run: the config grown by what the folder held
    (the union of encodings, seeds and scalings) and the corpus, tokenizer and test stream."""

    cfg: CompareConfig
    data: StudyData


def _name(encoding: str, seed: int) -> str:
    return f"{encoding}/seed{seed}"


class CompareStudy(Study):
    """The comparison as a :class:`~posenc.study.Study`: a unit is one missing evaluation
    (encoding, scaling, seed), the first of an (encoding, seed) also training, resuming or
    reusing its run (:meth:`plan`); a last unit times a training step per encoding. A unit
    returns ``{"head", "entry", "trained"}`` (``trained``: None but for the first unit of a
    run) or ``{"failed": why}`` when its training diverged; :meth:`commit` files it. With
    ``workers`` > 1 the runs train in worker processes (:meth:`executor`)."""

    kind = COMPARE_KIND
    render_every = RENDER_EVERY_S

    def __init__(self, cfg: CompareConfig, out_dir: Path, atlas: bool = True,
                 workers: int = 1, names: Mapping[str, str] = API_NAMES,
                 cluster: RayCluster | None = None) -> None:
        self.cfg = replace(cfg, train=cfg.train.resolved())   # a local data path absolute
        self.out_dir, self.atlas, self.workers, self.names = Path(out_dir), atlas, workers, names
        self.cluster = cluster
        self.prepared: PreparedComparison | None = None
        self._run: tuple[tuple[str, int], Any] | None = None    # the one run loaded now
        self._pooled = False                  # whether runs go to worker processes now

    def incomparable(self, existing: dict) -> str | None:
        return incomparable_reason(existing["config"], self.cfg)

    def prepare(self, existing: dict | None) -> dict:
        cfg = merged(existing["config"], self.cfg) if existing else self.cfg
        for encoding in cfg.encodings:        # every run's config is valid before we start
            _check_encoding(cfg, encoding)
        data = prepare_study_data(cfg.train)   # once: every run trains on it
        if max(cfg.eval_lengths) > len(data.test):
            raise UserError(f"evaluation length {max(cfg.eval_lengths)} is longer than the "
                            f"test split ({len(data.test)} tokens); use shorter "
                            f"{self.names['lengths']} or more data")
        if existing is not None and existing["corpus"].get("sha256") != \
                data.corpus_info["sha256"]:    # the data by content, not by its path
            raise UserError(f"{self.out_dir} holds a comparison on another corpus "
                            f"({existing['corpus'].get('name')}, sha256 "
                            f"{str(existing['corpus'].get('sha256'))[:12]}); pass "
                            f"{self.names['overwrite']} to replace it")
        sizes = {"train": len(data.train.train), "validation": len(data.train.validation),
                 "test": len(data.test)}                    # tokens, for the report
        results = existing or {"config": None, "corpus": {**data.corpus_info, "tokens": sizes},
                               "runs": []}
        results["config"] = cfg.to_dict()
        if "baseline" not in results:
            results["baseline"] = baseline_entry(data.train.train, data.test,
                                                 data.vocab_size, cfg.eval_tokens)
        self.prepared = PreparedComparison(cfg, data)
        return results

    def plan(self, results: dict) -> list[Unit]:
        """One unit per evaluation still missing, (encoding, scaling, seed); the first of an
        (encoding, seed) trains its run too (or resumes or reuses it) and weighs its steps."""
        cfg, done, units = self.prepared.cfg, _done(results), []
        for seed in cfg.seed_list:
            for encoding in cfg.encodings:
                plan = [s for e, s in planned_runs(cfg) if e == encoding]
                todo = [s for s in plan if (encoding, s, seed) not in done]
                for i, scaling in enumerate(todo):
                    label = run_label({"encoding": encoding, "inference_scaling": scaling})
                    units.append(Unit(("run", encoding, scaling, seed),
                                      f"{label} seed {seed}", unit_weight(cfg, 1, i == 0)))
        timing = results.get("timing") or {}
        if cfg.timing_rounds and not (set(timing.get("step_seconds", {})) == set(
                cfg.encodings) and timing.get("rounds") == cfg.timing_rounds):
            units.append(Unit(("timing",), "timing a training step per encoding"))
        return units

    def executor(self, units: Sequence[Unit]) -> UnitExecutor:
        """In order here, or with ``workers`` > 1 and two runs or more, each (encoding, seed)
        trained and evaluated under the scalings the plan lists in a worker process
        (:func:`~posenc.lab.compare.parallel_runs.run_group`); the timing unit runs here."""
        groups: dict[tuple[str, int], list[str | None]] = {}
        for unit in units:
            if unit.key[0] == "run":
                groups.setdefault((unit.key[1], unit.key[3]), []).append(unit.key[2])
        if self.cluster is not None and groups:
            self._pooled = True
            return self._on_cluster(units, groups)
        self._pooled = not (self.workers < 2 or len(groups) < 2)
        if not self._pooled:
            return InOrder(self)
        cfg, out_dir = self.prepared.cfg, self.out_dir

        def task(unit: Unit) -> tuple | None:
            if unit.key[0] != "run":
                return None
            group = (unit.key[1], unit.key[3])
            return group, run_group, (cfg, out_dir, *group, groups[group], 1)
        return PooledUnits(self, units, self.workers, task, _pick)

    def _on_cluster(self, units: Sequence[Unit],
                    groups: dict[tuple[str, int], list[str | None]]) -> UnitExecutor:
        """Each (encoding, seed) a Ray task (:mod:`~posenc.lab.compare.remote_runs`): the
        prepared data shared once, the run's files already here sent along, one GPU or
        one CPU and the training step's estimated memory asked for."""
        from ...study.ray_units import RayUnits, Shared
        from ...train.memory import train_step_bytes, validation_set_bytes
        from .remote_runs import read_run_files, run_group_shipped
        cfg, data = self.prepared.cfg, self.prepared.data
        config, shared_data, tasks = Shared(cfg), Shared(data), {}
        for (encoding, seed), scalings in groups.items():
            run_dir = self.out_dir / run_dir_of(encoding, seed)
            announce_run(run_dir)
            tasks[encoding, seed] = ((encoding, seed), run_group_shipped,
                                     (config, shared_data, read_run_files(run_dir), encoding,
                                      seed, scalings))

        def task(unit: Unit) -> tuple | None:
            return tasks[unit.key[1], unit.key[3]] if unit.key[0] == "run" else None

        def memory(unit: Unit) -> int:
            train = cfg.train_config(unit.key[1], data.vocab_size, unit.key[3])
            return train_step_bytes(train) + validation_set_bytes(train)
        return RayUnits(self, units, self.cluster, task, study_device(cfg.train),
                        _pick_shipped, memory)

    def run_unit(self, unit: Unit, advance) -> Any:
        from ...train.loop import TrainingDiverged
        cfg, data = self.prepared.cfg, self.prepared.data
        progress = UnitProgress(cfg, advance)
        if unit.key == ("timing",):
            return _measure_timing(cfg, data.vocab_size)
        _, encoding, scaling, seed = unit.key
        where, trained = run_dir_of(encoding, seed), None
        if self._run is None or self._run[0] != (encoding, seed):
            try:
                loaded, trained = ensure_trained(cfg, encoding, self.out_dir / where, data,
                                                 progress, seed)
            except TrainingDiverged as err:
                loaded = err
            self._run = ((encoding, seed), loaded)
        loaded = self._run[1]
        if isinstance(loaded, TrainingDiverged):
            return {"failed": str(loaded)}
        return {"head": run_head(cfg, loaded, encoding, scaling),
                "entry": evaluate_run(cfg, loaded, data.test, encoding, scaling, progress,
                                      run_dir=where),
                "trained": trained}

    def commit(self, results: dict, unit: Unit, result: Any) -> None:
        if unit.key == ("timing",):
            results["timing"] = result
            return
        _, encoding, _, seed = unit.key
        name = _name(encoding, seed)
        files = result.pop("files", None)         # a run trained on another machine
        if files:
            write_run_files(self.out_dir / run_dir_of(encoding, seed), files)
        if "failed" in result:
            results.setdefault("failed", {})[name] = result["failed"]
            return
        (results.get("failed") or {}).pop(name, None)
        add_seed(results, self.prepared.cfg, result["head"], result["entry"])
        results.setdefault("execution", {})[name] = self._execution()

    def _execution(self) -> dict[str, int]:
        """How the run just filed was computed: worker processes and intra-op threads (a
        sum over another split of the work differs in its last bits, about 1e-7)."""
        import torch
        if self._pooled and self.cluster is not None:
            return {"workers": 1, "threads": 1, "ray": True}
        if self._pooled:
            return {"workers": self.workers, "threads": 1}
        return {"workers": 1, "threads": torch.get_num_threads()}

    def close(self, abort: bool = False) -> None:
        """Let go of the run loaded for evaluation."""
        self._run = None

    def render(self, results: dict, directory: RunDirectory, final: bool) -> list[Path]:
        """report.md and index.html after a unit (the driver redraws at most every
        :data:`RENDER_EVERY_S` seconds: the HTML of a large comparison takes a good part of a
        second); at the end the plots and the atlas first."""
        report, plots = render_outputs(directory, results, plots=final,
                                       atlas=final and self.atlas)
        return [directory.path / RESULTS, report, *plots]


def _pick(unit: Unit, group: GroupResult, first: bool) -> dict:
    """A run unit's result out of its worker's :class:`GroupResult`."""
    if group.failed is not None:
        return {"failed": group.failed}
    head, entry = group.entries[unit.key[2]]
    return {"head": head, "entry": entry, "trained": group.trained if first else None}


def _pick_shipped(unit: Unit, shipped: tuple[GroupResult, dict[str, bytes]],
                  first: bool) -> dict:
    """A run unit's result out of its Ray task's (:class:`GroupResult`, run files); the
    first unit of a run carries the files for :meth:`CompareStudy.commit` to write."""
    group, files = shipped
    result = _pick(unit, group, first)
    return {**result, "files": files} if first else result


def trained_and_reused(outcome: StudyOutcome) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The (encoding, seed) runs a comparison trained now, and those it reused (evaluated
    from a run already on disk, or evaluated before), in plan order; from what its units
    returned and its results."""
    trained = [_name(u.key[1], u.key[3]) for u, r in zip(outcome.ran, outcome.returned)
               if u.key[0] == "run" and r.get("trained")]
    config = outcome.results["config"]
    first = int(config["train"]["seed"])
    failed = set(outcome.results.get("failed") or {})
    every = [_name(e, s) for s in range(first, first + int(config["seeds"]))
             for e in config["encodings"]]
    return tuple(trained), tuple(n for n in every if n not in failed and n not in trained)


def run_compare(cfg: CompareConfig, out_dir: Path, *, overwrite: bool = False,
                progress: bool = True, atlas: bool = True,
                names: Mapping[str, str] = API_NAMES, workers: int = 1,
                cluster: RayCluster | None = None) -> CompareOutcome:
    """Run, resume or grow the comparison ``cfg`` in ``out_dir``; see the module docstring.
    ``atlas``: also draw the atlas into ``out_dir/atlas`` at the end. The folder's lock,
    checks, atomic results and overwrite (removing only what a comparison writes) are the
    study core's (:func:`posenc.study.run_study`); ``names``: how its messages name the
    options (the CLI passes its flags). ``workers``: processes that train and evaluate runs
    side by side (:func:`posenc.lab.compare.parallel_runs.default_workers` picks a number);
    ``cluster``: run them as Ray tasks there instead (:mod:`posenc.study.ray_units`)."""
    require_positive_int("workers", workers)
    study = CompareStudy(cfg, out_dir, atlas, workers, names, cluster)
    outcome = run_study(study, out_dir, overwrite=overwrite, progress=progress, names=names)
    trained, reused = trained_and_reused(outcome)
    return CompareOutcome(outcome.out_dir, outcome.results, outcome.paths[1],
                          tuple(outcome.paths[2:]), trained, reused)
