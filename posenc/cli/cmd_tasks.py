"""``posenc tasks``: the synthetic-task study (:mod:`posenc.lab.tasks.study`)."""

from __future__ import annotations

import argparse
import sys
import time

from ..errors import UserError
from .args import name_list, path_arg
from .ray_flag import add_ray_flag, ray_cluster
from .run_flags import add_run_flags

NAME = "tasks"
#: the module whose study this command runs (``posenc plot`` finds its kind there)
STUDY = "posenc.lab.tasks.study"
HELP = ("train decoder-only models on synthetic tasks (copy, ...) and encoder-decoder models "
        "on reversing, score exact match on longer inputs over seeds, write results.json, "
        "report.md and task_accuracy.png")


def add_arguments(p: argparse.ArgumentParser) -> None:
    from ..lab.compare.parallel_runs import MAX_WORKERS, MIN_PARALLEL_STEPS
    from ..lab.tasks.presets import TASK_PRESETS, task_preset_help
    p.add_argument("--out", required=True, type=path_arg, help="output directory (grown if it holds a study "
                   "with the same setting)")
    p.add_argument("--preset", default="tasks", choices=sorted(TASK_PRESETS),
                   help=task_preset_help())
    p.add_argument("--encodings", type=name_list, help="comma-separated encodings for both "
                   "parts, e.g. nope,rope,alibi")
    p.add_argument("--seeds", type=int, help="seeds per run (0..N-1); a study already in "
                   "--out grows: only missing runs are trained")
    p.add_argument("--workers", default="auto", help="processes that train runs side by "
                   "side, one thread each (default auto: one per CPU core, at most "
                   f"{MAX_WORKERS}, on a CPU; 1 on a GPU or below {MIN_PARALLEL_STEPS} "
                   "training steps in all)")
    add_run_flags(p, "the study")
    add_ray_flag(p)
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def _warn(text: str) -> None:
    print(f"posenc {NAME}: warning: {text}", file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    from ..lab.tasks.study import FIGURE, REPORT, RESULTS, run_task_study
    from ..study import CLI_NAMES
    if args.seeds is not None and args.seeds < 1:
        raise UserError(f"--seeds must be >= 1, got {args.seeds}")
    from ..eval.lengths import eval_device
    from ..lab.compare.parallel_runs import resolve_workers
    from ..lab.tasks.study import planned_runs, resolve_config
    encodings = list(args.encodings) if args.encodings else None
    cfg = resolve_config(args.preset, args.seeds, encodings)
    workers = resolve_workers(args.workers, eval_device(), len(planned_runs(cfg)),
                              max(cfg.train.steps, cfg.seq2seq_train.steps), _warn)
    start = time.perf_counter()
    results = run_task_study(args.out, preset=cfg, progress=not args.no_progress,
                             overwrite=args.overwrite, names=CLI_NAMES, workers=workers,
                             cluster=ray_cluster(args))
    minutes = (time.perf_counter() - start) / 60
    print(f"{len(results['runs'])} runs ({len(results['trained'])} trained now) in "
          f"{minutes:.1f} min")
    for what, name in (("results", RESULTS), ("report", REPORT), ("plot", FIGURE)):
        print(f"{what + ':':8} {args.out}/{name}")
    return 0
