"""The synthetic-task study: train short on tasks, test exact match on longer inputs.

``run_task_study(out_dir, preset="tasks")`` trains, for every seed,

- a decoder-only :class:`~posenc.models.lm.TransformerLM` per encoding and task of
  ``lm_tasks`` (lengths up to ``train_len``), scored by exact match at ``train_len`` x
  ``length_multipliers`` (:func:`posenc.eval.tasks.task_accuracy_at_lengths`);
- an encoder-decoder :class:`~posenc.models.seq2seq.Seq2SeqTransformer` per encoding of
  ``seq2seq_encodings`` (the same encoding in encoder and decoder) on ``seq2seq_task``,
  trained with teacher forcing and scored by greedy decoding on longer sources
  (:func:`posenc.eval.tasks.seq2seq_accuracy_at_lengths`);

and writes ``results.json`` (every run's numbers and the mean ± spread over seeds),
``report.md`` (tables, rankings with ties, the published ordering checked with verdicts that
respect the spread; :mod:`posenc.lab.task_report`) and ``task_accuracy.png``.

Each run trains on one CPU thread (tiny models gain nothing from more, and on a busy machine
threads contend), and records its wall and CPU seconds. Runs are seconds each and are not
checkpointed: results.json is rewritten after every run,
and a second call skips the (part, task, encoding, seed) runs it already holds, so adding
encodings or seeds trains only what is missing. A directory holding a study with another
setting (budget, model, lengths) is refused with the fields that differ.
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from ..errors import UserError
from ..eval.lengths import eval_device
from ..runio import LOCK_FILE, DirectoryLock
from .compare import save_results
from .task_presets import TASK_PRESETS, TaskStudyConfig, task_preset

__all__ = ["OUTPUTS", "TASK_PRESETS", "TaskStudyConfig", "run_task_study", "task_preset"]

RESULTS = "results.json"
REPORT = "report.md"
FIGURE = "task_accuracy.png"
OUTPUTS = (RESULTS, REPORT, FIGURE)
CURVE_POINTS = 50
KIND = "posenc task study"


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
    options = cfg.options_for(encoding)
    if part == "lm":
        from ..models.lm import TransformerLM
        return TransformerLM(replace(cfg.model, max_len=max_len, pe=encoding,
                                     pe_options=options))
    from ..models.seq2seq import Seq2SeqTransformer
    from ..models.seq2seq_config import Seq2SeqConfig
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


def run_one(cfg: TaskStudyConfig, part: str, task: str, encoding: str, seed: int,
            on_step=None) -> dict:
    """Train and evaluate one run; its results.json entry."""
    from ..eval.tasks import seq2seq_accuracy_at_lengths, task_accuracy_at_lengths
    from ..train.seq2seq_loop import train_seq2seq
    from ..train.task_loop import train_lm_task
    tcfg = cfg.train_config(part, task, seed)
    device = eval_device()
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
    else:
        model = build_model(cfg, part, encoding, cfg.seq2seq_len + 1).to(device)
        fitted = train_seq2seq(model, task, tcfg, on_step)
        start = time.perf_counter()
        scored = seq2seq_accuracy_at_lengths(model, task, cfg.seq2seq_lengths,
                                             n_examples=cfg.eval_examples,
                                             seed=cfg.eval_seed, batch_size=100)
        train_len = cfg.seq2seq_len
    return {
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


# ------------------------------------------------------------------ output directory
def read_results(out_dir: Path) -> dict | None:
    """The study's results.json in ``out_dir``, None if absent; ValueError if it is not one."""
    path = Path(out_dir) / RESULTS
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise UserError(f"{path} is not valid JSON; choose another --out") from None
    if not isinstance(data, dict) or data.get("kind") != KIND or "runs" not in data:
        raise UserError(f"{path} is not a posenc task study; choose another --out")
    return data


def check_out_dir(cfg: TaskStudyConfig, out_dir: Path, overwrite: bool = False
                  ) -> dict | None:
    """Existing results to grow, or None for a new study; ValueError when ``out_dir``
    holds something else or a study with another setting. Writes nothing. With
    ``overwrite`` a study already there is ignored (other files still refuse)."""
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise NotADirectoryError(f"--out {out_dir} exists and is not a directory")
    existing = read_results(out_dir)
    if overwrite and existing is not None:
        return None
    if existing is None:
        if out_dir.exists() and any(p.name not in OUTPUTS and p.name != LOCK_FILE
                                    for p in out_dir.iterdir()):
            raise UserError(f"{out_dir} is not empty and holds no task study ({RESULTS}); "
                             "choose a new or empty directory")
        return None
    old, new = TaskStudyConfig.from_dict(existing["config"]).setting(), cfg.setting()
    diff = sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k))
    if diff:
        raise UserError(f"{out_dir} holds a task study with another setting (differs in "
                         f"{', '.join(diff)}); its runs are not comparable: choose another "
                         "--out")
    return existing


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


def write_outputs(out_dir: Path, results: dict, figure: bool = True) -> list[Path]:
    """results.json (with the summary), then the figure, then report.md."""
    from ..viz.task_plots import plot_task_accuracy
    from .task_report import summarize, write_report
    results["summary"] = summarize(results)
    save_results(out_dir, results)
    paths = [out_dir / RESULTS]
    plots = []
    if figure and results["runs"]:
        plots.append(plot_task_accuracy(results, out_dir / FIGURE))
    paths.append(write_report(results, out_dir / REPORT, [p.name for p in plots]))
    return paths + plots


def resolve_config(preset: str | TaskStudyConfig, seeds: int | list[int] | None,
                   encodings: list[str] | None) -> TaskStudyConfig:
    """The study's configuration: a preset (name or config), with ``seeds`` (a count N
    meaning seeds 0..N-1, or a list) and ``encodings`` (both parts) replaced if given."""
    cfg = preset if isinstance(preset, TaskStudyConfig) else task_preset(preset)
    changes: dict[str, Any] = {}
    if seeds is not None:
        if isinstance(seeds, bool) or (isinstance(seeds, int) and seeds < 1):
            raise UserError(f"seeds must be a count >= 1 or a list of seeds, got {seeds!r}")
        changes["seeds"] = list(range(seeds)) if isinstance(seeds, int) else list(seeds)
    if encodings is not None:
        changes["encodings"] = changes["seq2seq_encodings"] = list(encodings)
    return TaskStudyConfig.from_dict({**cfg.to_dict(), **changes}) if changes else cfg


def run_task_study(out_dir: str | Path, preset: str | TaskStudyConfig = "tasks",
                   seeds: int | list[int] | None = None, encodings: list[str] | None = None,
                   progress: bool = True, overwrite: bool = False) -> dict:
    """Run (or grow) a task study into ``out_dir`` and return its results (see the module
    docstring). ``seeds``: a count N (seeds 0..N-1) or a list; ``encodings`` replaces both
    parts' encodings; ``overwrite`` starts over instead of growing a study already there.
    Bad input raises ValueError before anything is written. One process at a time writes
    ``out_dir`` (its :class:`~posenc.runio.DirectoryLock`)."""
    out_dir = Path(out_dir)
    lock = DirectoryLock(out_dir, "posenc tasks")
    try:
        if out_dir.is_dir():
            lock.acquire()                 # before looking: nobody changes it meanwhile
        return _run_task_study(out_dir, preset, seeds, encodings, progress, overwrite, lock)
    finally:
        lock.release()


def _run_task_study(out_dir: Path, preset: str | TaskStudyConfig,
                    seeds: int | list[int] | None, encodings: list[str] | None,
                    progress: bool, overwrite: bool, lock: DirectoryLock) -> dict:
    from tqdm.auto import tqdm
    cfg = resolve_config(preset, seeds, encodings)
    existing = check_out_dir(cfg, out_dir, overwrite)
    for part, encoding in dict.fromkeys((p, e) for p, _, e, _ in planned_runs(cfg)):
        build_model(cfg, part, encoding, 8)          # bad encoding options raise here
    full = _merged_config(cfg, existing)
    if not lock.held:                      # a new folder: make it, lock it, look again
        out_dir.mkdir(parents=True, exist_ok=True)
        lock.acquire()
        if check_out_dir(cfg, out_dir, overwrite) is not None:
            raise UserError(f"{out_dir} was written by another process meanwhile")
    for name in OUTPUTS if existing is None else ():
        (out_dir / name).unlink(missing_ok=True)
    results = existing or {"kind": KIND, "config": full.to_dict(), "runs": []}
    results["config"] = full.to_dict()
    save_results(out_dir, results)
    done = {run_key(r) for r in results["runs"]}
    todo = [k for k in planned_runs(cfg) if k not in done]
    steps = {"lm": cfg.train.steps, "seq2seq": cfg.seq2seq_train.steps}
    bar = tqdm(total=sum(steps[k[0]] for k in todo), disable=not progress, desc="tasks",
               dynamic_ncols=True)
    started = time.perf_counter()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)        # tiny models: more threads only contend on a busy CPU
    try:
        for part, task, encoding, seed in todo:
            bar.set_postfix_str(f"{part} {task} {encoding} seed {seed}", refresh=True)
            results["runs"].append(run_one(cfg, part, task, encoding, seed,
                                           on_step=lambda _: bar.update(1)))
            results.setdefault("seconds", 0.0)
            results["seconds"] = round(results["seconds"] + time.perf_counter() - started, 1)
            started = time.perf_counter()
            write_outputs(out_dir, results, figure=False)
        write_outputs(out_dir, results)
    finally:
        torch.set_num_threads(threads)
        bar.close()
    results["trained"] = [list(k) for k in todo]
    return results
