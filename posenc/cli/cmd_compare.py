"""``posenc compare``: train each encoding short, test it long, write results/report/plots."""

from __future__ import annotations

import argparse
import time

from ..errors import UserError
from .paths import path_arg

NAME = "compare"
HELP = ("train every encoding with the same data, budget and seeds, evaluate at L..8L "
        "(plus RoPE inference-time scalings), write results.json, report.md and PNG plots")

#: flags a task preset takes (the rest belong to the perplexity comparison)
TASK_FLAGS = ("out", "preset", "encodings", "seeds", "overwrite", "threads", "no_progress")


def run_tasks(args: argparse.Namespace) -> int:
    """``--preset tasks``: the synthetic-task study (:mod:`posenc.lab.task_study`)."""
    from ..lab.task_study import FIGURE, REPORT, RESULTS, run_task_study
    ignored = [f"--{k.replace('_', '-')}" for k, v in vars(args).items()
               if k not in TASK_FLAGS and k != "command" and v not in (None, False)
               and not callable(v)]
    if ignored:
        raise UserError(f"--preset {args.preset} takes only --encodings, --seeds, "
                         f"--overwrite and --no-progress; drop {', '.join(ignored)}")
    start = time.perf_counter()
    results = run_task_study(args.out, preset=args.preset, seeds=args.seeds,
                             encodings=list(args.encodings) if args.encodings else None,
                             progress=not args.no_progress, overwrite=args.overwrite)
    minutes = (time.perf_counter() - start) / 60
    print(f"{len(results['runs'])} runs ({len(results['trained'])} trained now) in "
          f"{minutes:.1f} min")
    for what, name in (("results", RESULTS), ("report", REPORT), ("plot", FIGURE)):
        print(f"{what + ':':8} {args.out}/{name}")
    return 0


#: presets run by another function than the perplexity comparison: name -> (help, run(args)).
#: They share --out, --encodings, --seeds, --overwrite and --no-progress.
OTHER_PRESETS: dict[str, tuple[str, object]] = {
    "tasks": ("synthetic tasks (copy, recall, ... and seq2seq reverse): exact match past the "
              "training length, 3 seeds", run_tasks),
    "tasks-smoke": ("the task study in seconds (checks the pipeline)", run_tasks),
}


def _int_list(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}")
    if not values:
        raise argparse.ArgumentTypeError("expected at least one integer")
    return values


def _name_list(text: str) -> tuple[str, ...]:
    values = tuple(v.strip() for v in text.split(",") if v.strip())
    if not values:
        raise argparse.ArgumentTypeError("expected at least one name")
    return values


def add_arguments(p: argparse.ArgumentParser) -> None:
    from ..lab.presets import PRESETS
    p.add_argument("--out", required=True, help="output directory (resumed if it holds the "
                   "same comparison)", type=path_arg)
    p.add_argument("--preset", default="default", choices=sorted(PRESETS) + sorted(
                   OTHER_PRESETS), help="default: every encoding, one seed, ~7 min on a 2-core "
                   "CPU; seeds3: the same with 3 seeds (for conclusions); paper: larger, for "
                   "a GPU; smoke: seconds" + "".join(f"; {k}: {h}" for k, (h, _) in
                                                     OTHER_PRESETS.items()))
    p.add_argument("--encodings", type=_name_list, help="comma-separated encodings, e.g. "
                   "nope,learned,sinusoidal,rope,alibi,t5 (see `posenc list`)")
    p.add_argument("--steps", type=int, help="training steps per encoding")
    p.add_argument("--train-len", type=int, help="training length L")
    p.add_argument("--lengths", type=_int_list,
                   help="evaluation lengths (default: L,2L,4L,8L,16L)")
    p.add_argument("--scalings", type=_name_list,
                   help="RoPE inference-time scalings, e.g. linear:4,ntk:4,dynamic,yarn:4,logn"
                        " ('none' for none)")
    p.add_argument("--eval-tokens", type=int, help="tokens scored per evaluation length")
    p.add_argument("--stride", type=int, help="sliding-window stride (default: "
                   "non-overlapping windows)")
    p.add_argument("--pe-option", action="append", metavar="ENC:KEY=VALUE",
                   help="an encoding option, e.g. sinusoidal:scale=1.0 or t5:max_distance=256 "
                        "(repeatable; replaces the preset's value)")
    p.add_argument("--data", help="text file or folder (default: the Python standard library)",
                   type=path_arg)
    p.add_argument("--tokenizer", help="byte or bpe:N")
    p.add_argument("--seed", type=int, help="first seed (default 0)")
    p.add_argument("--seeds", type=int, help="seeds per encoding (seed, seed+1, ...); an "
                   "existing comparison grows: only missing runs are trained")
    p.add_argument("--overwrite", action="store_true",
                   help="replace a different comparison in --out instead of refusing")
    p.add_argument("--threads", type=int, help="CPU threads for torch (default: torch's "
                   "choice; 1 is faster on a machine that other jobs keep busy)")
    p.add_argument("--no-atlas", action="store_true", help="do not draw the atlas into "
                   "DIR/atlas (about 20 s)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def _pe_options(name: str, items: list[str] | None) -> dict | None:
    """The preset's pe_options with ``ENC:KEY=VALUE`` items applied (None: unchanged)."""
    from ..lab.presets import PRESETS
    from ..train.config import parse_value
    if not items:
        return None
    options = {enc: dict(opts) for enc, opts in PRESETS[name].pe_options.items()}
    for item in items:
        enc, colon, rest = item.partition(":")
        key, eq, value = rest.partition("=")
        if not (colon and eq and enc and key):
            raise UserError(f"--pe-option must look like ENC:KEY=VALUE, got {item!r}")
        options.setdefault(enc, {})[key] = parse_value(value)
    return options


def run(args: argparse.Namespace) -> int:
    from ..lab.compare import run_compare
    from ..lab.presets import preset
    if args.threads is not None:
        if args.threads < 1:
            raise UserError(f"--threads must be >= 1, got {args.threads}")
        import torch
        torch.set_num_threads(args.threads)
    if args.preset in OTHER_PRESETS:
        return OTHER_PRESETS[args.preset][1](args)
    scalings = args.scalings
    if scalings is not None and [s.lower() for s in scalings] == ["none"]:
        scalings = ()
    cfg = preset(args.preset, pe_options=_pe_options(args.preset, args.pe_option),
                 encodings=args.encodings, steps=args.steps,
                 train_len=args.train_len, lengths=args.lengths, scalings=scalings,
                 eval_tokens=args.eval_tokens, stride=args.stride, data=args.data,
                 tokenizer=args.tokenizer, seed=args.seed, seeds=args.seeds)
    start = time.perf_counter()
    outcome = run_compare(cfg, args.out, overwrite=args.overwrite,
                          progress=not args.no_progress, atlas=not args.no_atlas)
    minutes = (time.perf_counter() - start) / 60
    print(f"{len(outcome.results['runs'])} runs ({len(outcome.trained)} trained now, "
          f"{len(outcome.reused)} reused) in {minutes:.1f} min")
    print(f"index:   {outcome.out_dir / 'index.html'}")
    print(f"results: {outcome.out_dir / 'results.json'}")
    print(f"report:  {outcome.report}")
    for path in outcome.plots:
        print(f"plot:    {path}")
    if (outcome.out_dir / "atlas" / "index.html").exists():
        print(f"atlas:   {outcome.out_dir / 'atlas' / 'index.html'}")
    failed = outcome.results.get("failed") or {}
    for name, message in failed.items():
        print(f"failed:  {name}: {message}")
    return 3 if failed else 0
