"""The synthetic-task study: train short on tasks, test exact match on longer inputs.

``run_task_study(out_dir, preset="tasks")`` trains, for every seed,

- a decoder-only :class:`~posenc.models.lm.TransformerLM` per encoding and task of
  ``lm_tasks`` (lengths up to ``train_len``), scored by exact match at ``train_len`` x
  ``length_multipliers`` (:func:`posenc.eval.tasks.task_accuracy_at_lengths`), and for a
  task with an out-of-distribution test (flip-flop: its sparse language,
  ``posenc.data.synthetic.OUT_OF_DISTRIBUTION``) on that too, at the same lengths;
- an encoder-decoder :class:`~posenc.models.seq2seq.Seq2SeqTransformer` per encoding of
  ``seq2seq_encodings`` (the same encoding in encoder and decoder) on ``seq2seq_task``,
  trained with teacher forcing and scored by greedy decoding on longer sources
  (:func:`posenc.eval.tasks.seq2seq_accuracy_at_lengths`);

and writes ``results.json`` (every run's numbers and the mean ± spread over seeds),
``report.md`` (tables, rankings with ties, the published ordering checked with verdicts that
respect the spread; :mod:`posenc.lab.tasks.report`) and ``task_accuracy.png``.

Each run trains on one CPU thread (tiny models gain nothing from more, and on a busy machine
threads contend), and records its wall and CPU seconds. With ``workers`` > 1 the runs train
in that many worker processes side by side (:class:`~posenc.lab.compare.parallel_runs.RunPool`), one
thread each as in one process, so their numbers are the same; results.json still takes them
in plan order; with a Ray cluster each run is a Ray task (:mod:`posenc.study.ray_units`). Runs take seconds to minutes and are not checkpointed. The study runs on the
study core (:class:`TaskStudy`, :func:`posenc.study.run_study`): results.json is rewritten
atomically after every run, a second call skips the (part, task, encoding, seed) runs it
already holds, so adding encodings or seeds trains only what is missing, and a directory
holding a study with another setting (budget, model, lengths) is refused with the fields that
differ.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from ...encodings.checks import require_positive_int
from ...errors import UserError
from ...eval.lengths import eval_device
from ...study import API_NAMES, RunDirectory, Study, StudyKind, Unit, register_kind, run_study
from ...study.placement import placement_markdown
from ...study.ray_units import RayCluster
from ...study.study import InOrder, UnitExecutor
from ..compare.presets import require_seed_count
from ..compare.unit_pool import PooledUnits
from .fields import check_task_results
from .presets import TASK_PRESETS, TaskStudyConfig, task_preset

__all__ = ["KIND", "OUTPUTS", "TASK_PRESETS", "TaskStudy", "TaskStudyConfig",
           "run_task_study", "task_preset"]

RESULTS = "results.json"
REPORT = "report.md"
FIGURE = "task_accuracy.png"
OUTPUTS = (RESULTS, REPORT, FIGURE)
CURVE_POINTS = 50
#: the ``kind`` results.json of a task study held before schemas were stamped (schema 0)
LEGACY_KIND = "posenc task study"


# ------------------------------------------------------------------ the plan
def planned_runs(cfg: TaskStudyConfig) -> list[tuple[str, str, str, int]]:
    """(part, task, encoding, seed) of every run, in the order they are trained."""
    plan = [("lm", task, enc, seed) for task in cfg.lm_tasks for enc in cfg.encodings
            for seed in cfg.seeds]
    if cfg.seq2seq_task is not None:
        plan += [("seq2seq", cfg.seq2seq_task, enc, seed) for enc in cfg.seq2seq_encodings
                 for seed in cfg.seeds]
    return plan


def run_key(run: dict) -> tuple[str, str, str, int]:
    return run["part"], run["task"], run["encoding"], int(run["seed"])


def build_model(cfg: TaskStudyConfig, part: str, encoding: str, max_len: int):
    """The untrained model of one run (initialised from the current torch seed)."""
    if part == "lm":
        from ...models.lm import TransformerLM
        return TransformerLM(cfg.lm_config(encoding, max_len))
    options = cfg.options_for(encoding)
    from ...models.seq2seq import Seq2SeqTransformer
    from ...models.seq2seq_config import Seq2SeqConfig
    return Seq2SeqTransformer(Seq2SeqConfig(
        vocab_size=cfg.model.vocab_size, d_model=cfg.model.d_model, n_heads=cfg.model.n_heads,
        n_encoder_layers=cfg.seq2seq_layers, n_decoder_layers=cfg.seq2seq_layers,
        max_len=max_len, encoder_pe=encoding, encoder_pe_options=options,
        decoder_pe_options=options))


def _curve(losses: list[float]) -> list[list[float]]:
    """About CURVE_POINTS (step, mean loss over the steps since the previous point)."""
    every = max(1, -(-len(losses) // CURVE_POINTS))
    return [[min(i + every, len(losses)), sum(losses[i:i + every]) / len(losses[i:i + every])]
            for i in range(0, len(losses), every)]


def run_in_worker(cfg: TaskStudyConfig, part: str, task: str, encoding: str,
                  seed: int) -> dict:
    """:func:`run_one` in a worker process, on one thread as in the study's own process."""
    torch.set_num_threads(1)
    return run_one(cfg, part, task, encoding, seed)


def run_one(cfg: TaskStudyConfig, part: str, task: str, encoding: str, seed: int,
            on_step=None) -> dict:
    """Train and evaluate one run; its results.json entry."""
    from ...data.synthetic import OUT_OF_DISTRIBUTION
    from ...eval.tasks import seq2seq_accuracy_at_lengths, task_accuracy_at_lengths
    from ...train.seq2seq_loop import train_seq2seq
    from ...train.task_loop import train_lm_task
    tcfg = cfg.train_config(part, task, seed)
    device = eval_device()
    ood = shifted = None
    cpu_start = time.process_time()
    torch.manual_seed(seed)
    if part == "lm":
        model = build_model(cfg, part, encoding, cfg.train_len).to(device)
        fitted = train_lm_task(model, task, tcfg, on_step)
        start = time.perf_counter()
        scored = task_accuracy_at_lengths(model, task, cfg.lm_lengths,
                                          n_examples=cfg.eval_examples, seed=cfg.eval_seed,
                                          batch_size=64)
        train_len = cfg.train_len
        ood = OUT_OF_DISTRIBUTION.get(task)
        if ood is not None:                      # the same model on the shifted language
            shifted = task_accuracy_at_lengths(model, ood, cfg.lm_lengths,
                                               n_examples=cfg.eval_examples,
                                               seed=cfg.eval_seed, batch_size=64)
    else:
        model = build_model(cfg, part, encoding, cfg.seq2seq_len + 1).to(device)
        fitted = train_seq2seq(model, task, tcfg, on_step)
        start = time.perf_counter()
        scored = seq2seq_accuracy_at_lengths(model, task, cfg.seq2seq_lengths,
                                             n_examples=cfg.eval_examples,
                                             seed=cfg.eval_seed, batch_size=100)
        train_len = cfg.seq2seq_len
    extra = {} if ood is None else {"out_of_distribution": {
        "task": ood, "lengths": {str(r.length): r.to_dict() for r in shifted}}}
    return {
        **extra,
        "part": part, "task": task, "encoding": encoding, "seed": seed,
        "options": cfg.options_for(encoding), "train_len": train_len,
        "lengths": {str(r.length): r.to_dict() for r in scored},
        "final_loss": sum(fitted.losses[-20:]) / len(fitted.losses[-20:]),
        "curve": _curve(fitted.losses),
        "params": sum(p.numel() for p in model.parameters()),
        "seconds": {"train": round(fitted.seconds, 2),
                    "eval": round(time.perf_counter() - start, 2),
                    "cpu": round(time.process_time() - cpu_start, 2)},
    }


# ------------------------------------------------------------------ the study
def _is_legacy(data: dict) -> bool:
    """A task study's results.json written before kinds and schemas were stamped."""
    return data.get("kind") == LEGACY_KIND and "runs" in data and "config" in data


def _migrate(data: dict, schema: int) -> dict:
    """Schema 0 (flat config) in the current layout (nested config)."""
    return {**data, "config": TaskStudyConfig.from_dict(data["config"]).to_dict()}


def render_task_study(results: dict, directory: RunDirectory, final: bool = True
                      ) -> list[Path]:
    """report.md, and when ``final`` the figure first (the report links it)."""
    from ...viz.task_plots import plot_task_accuracy
    from .report import render_report
    plots = []
    if final and results["runs"]:
        plots.append(plot_task_accuracy(results, directory.path / FIGURE))
    report = directory.write(REPORT, render_report(results, [p.name for p in plots])
                             + placement_markdown(results))
    return [directory.path / RESULTS, report, *plots]


KIND = register_kind(StudyKind(
    name="tasks", schema=1, command="posenc tasks", outputs=OUTPUTS, legacy=_is_legacy,
    migrate=_migrate, description="posenc task study",
    redraw=lambda results, directory: redraw_task_study(results, directory)))


def redraw_task_study(results: dict, directory: RunDirectory) -> list[Path]:
    """``posenc plot``: the figure and report.md again from a results.json (checked; the
    summary is recomputed from the runs)."""
    from .report import summarize
    check_task_results(results, directory.path / RESULTS)
    results["summary"] = summarize(results)
    return render_task_study(results, directory)[1:]


def _merged_config(cfg: TaskStudyConfig, existing: dict | None) -> TaskStudyConfig:
    """``cfg`` whose encodings and seeds also cover those already in ``existing``."""
    if existing is None:
        return cfg
    old = TaskStudyConfig.from_dict(existing["config"])

    def union(a: tuple, b: tuple) -> tuple:
        return tuple(dict.fromkeys((*a, *b)))
    return TaskStudyConfig.from_dict({
        **cfg.to_dict(), "encodings": list(union(old.encodings, cfg.encodings)),
        "seq2seq_encodings": list(union(old.seq2seq_encodings, cfg.seq2seq_encodings)),
        "seeds": sorted(union(old.seeds, cfg.seeds))})


class TaskStudy(Study):
    """The task study as a :class:`~posenc.study.Study`: a unit is one (part, task,
    encoding, seed) run, weighted by its training steps; it returns the run's results.json
    entry (:func:`run_one`) and :meth:`commit` files it. With ``workers`` > 1 the runs train
    in worker processes (:meth:`executor`). The config is the one asked for; the results
    hold it grown by what the folder held."""

    kind = KIND

    def __init__(self, cfg: TaskStudyConfig, workers: int = 1,
                 cluster: RayCluster | None = None) -> None:
        self.cfg = cfg
        self.workers, self.cluster = workers, cluster
        self._clock = time.perf_counter()     # when the last unit was filed (wall time)

    def check_existing(self, existing: dict, path: Path) -> None:
        if check_task_results(existing, path, repair=True):
            from .report import summarize
            existing["summary"] = summarize(existing)

    def incomparable(self, existing: dict) -> str | None:
        old = TaskStudyConfig.from_dict(existing["config"]).setting()
        new = self.cfg.setting()
        diff = sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k))
        return f"differs in {', '.join(diff)}; its runs are not comparable" if diff else None

    def prepare(self, existing: dict | None) -> dict:
        for part, encoding in dict.fromkeys((p, e) for p, _, e, _ in planned_runs(self.cfg)):
            build_model(self.cfg, part, encoding, 8)          # bad encoding options raise here
        results = existing or {"config": None, "runs": []}
        results["config"] = _merged_config(self.cfg, existing).to_dict()
        self._clock = time.perf_counter()
        return results

    def plan(self, results: dict) -> list[Unit]:
        done = {run_key(r) for r in results["runs"]}
        steps = {"lm": self.cfg.train.steps, "seq2seq": self.cfg.seq2seq_train.steps}
        return [Unit(key, " ".join(map(str, key[:3])) + f" seed {key[3]}", steps[key[0]])
                for key in planned_runs(self.cfg) if key not in done]

    def executor(self, units: Sequence[Unit]) -> UnitExecutor:
        """In order here, or with ``workers`` > 1 and two runs or more, every run queued to
        worker processes at once (:func:`run_in_worker`), taken in plan order; with a Ray
        ``cluster``, every run a Ray task there (one CPU, or one GPU where runs use CUDA)."""
        cfg = self.cfg
        if self.cluster is not None:
            from ...study.ray_units import RayUnits, Shared
            config = Shared(cfg)
            return RayUnits(self, units, self.cluster,
                            lambda unit: (unit.key, run_in_worker, (config, *unit.key)),
                            eval_device())
        if self.workers < 2 or len(units) < 2:
            return InOrder(self)
        return PooledUnits(self, units, self.workers,
                           lambda unit: (unit.key, run_in_worker, (cfg, *unit.key)))

    def run_unit(self, unit: Unit, advance) -> dict:
        return run_one(self.cfg, *unit.key, on_step=lambda _: advance(1))

    def commit(self, results: dict, unit: Unit, result: dict) -> None:
        """File one run; ``seconds`` grows by the wall time since the previous run was
        filed (side by side in workers, the wall time, not the sum of the runs')."""
        from .report import summarize
        now = time.perf_counter()
        took, self._clock = now - self._clock, now
        results["runs"].append(result)
        results["seconds"] = round(results.get("seconds", 0.0) + took, 1)
        results["summary"] = summarize(results)

    def render(self, results: dict, directory: RunDirectory, final: bool) -> list[Path]:
        return render_task_study(results, directory, final)


def resolve_config(preset: str | TaskStudyConfig, seeds: int | list[int] | None,
                   encodings: list[str] | None) -> TaskStudyConfig:
    """The study's configuration: a preset (name or config), with ``seeds`` (a count N
    meaning seeds 0..N-1, or a list) and ``encodings`` (both parts; a lab variant the
    decoder-only part only) replaced if given."""
    cfg = preset if isinstance(preset, TaskStudyConfig) else task_preset(preset)
    changes: dict[str, Any] = {}
    if seeds is not None:
        if isinstance(seeds, bool) or (isinstance(seeds, int) and seeds < 1):
            raise UserError(f"seeds must be a count >= 1 or a list of seeds, got {seeds!r}")
        if isinstance(seeds, int):
            require_seed_count("seeds", seeds)
        changes["seeds"] = list(range(seeds)) if isinstance(seeds, int) else list(seeds)
    if encodings is not None:
        from ...encodings import list_encodings
        changes["encodings"] = list(encodings)       # lab variants are decoder-only
        changes["seq2seq_encodings"] = [e for e in encodings if e in list_encodings()]
    return TaskStudyConfig.from_dict({**cfg.to_dict(), **changes}) if changes else cfg


def run_task_study(out_dir: str | Path, preset: str | TaskStudyConfig = "tasks",
                   seeds: int | list[int] | None = None, encodings: list[str] | None = None,
                   progress: bool = True, overwrite: bool = False,
                   names: Mapping[str, str] = API_NAMES, workers: int = 1,
                   cluster: RayCluster | None = None) -> dict:
    """Run (or grow) a task study into ``out_dir`` and return its results (see the module
    docstring), with ``trained``: the runs trained now. ``seeds``: a count N (seeds 0..N-1)
    or a list; ``encodings`` replaces both parts' encodings; ``overwrite`` starts over
    (removing only what the study wrote) instead of growing a study already there. Bad
    input raises before anything is written; the directory's lock, checks and atomic
    results are :func:`posenc.study.run_study`'s. ``names``: how messages name the options
    (the CLI passes its flags). ``workers``: processes that train runs side by side
    (:func:`posenc.lab.compare.parallel_runs.default_workers` picks a number); ``cluster``:
    run them as Ray tasks there instead (:mod:`posenc.study.ray_units`)."""
    require_positive_int("workers", workers)
    study = TaskStudy(resolve_config(preset, seeds, encodings), workers, cluster)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)        # tiny models: more threads only contend on a busy CPU
    try:
        outcome = run_study(study, out_dir, overwrite=overwrite, progress=progress,
                            names=names)
    finally:
        torch.set_num_threads(threads)
    outcome.results["trained"] = [list(u.key) for u in outcome.ran]
    return outcome.results
