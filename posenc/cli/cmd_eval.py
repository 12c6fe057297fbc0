"""``posenc eval RUN``: perplexity (and entropy, task accuracy) of a trained run against length.

Each evaluation setting (lengths, stride, split, scaling, ...) writes its own file,
``eval[-<scaling>]-<digest of the setting>.json``, so evaluating again with other settings
never replaces an earlier result. The run folder is locked while it is evaluated.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
from pathlib import Path

from ..errors import UserError
from .args import int_list as _int_list
from .args import path_arg
from .devices import add_device_arguments, resolve_device

NAME = "eval"
HELP = ("evaluate a trained run at several lengths on held-out data (optionally with RoPE "
        "inference-time scaling, attention entropy, synthetic-task accuracy)")
#: the default evaluation lengths, as multiples of the run's training length L
DEFAULT_LENGTH_MULTIPLIERS = (1, 2, 4, 8, 16)


def multiples_of_L(multipliers: tuple[int, ...] | None = None) -> str:
    """``(1, 2, 4)`` -> ``"L,2L,4L"`` (default: the default lengths), as help text says them."""
    multipliers = DEFAULT_LENGTH_MULTIPLIERS if multipliers is None else multipliers
    return ",".join("L" if m == 1 else f"{m}L" for m in multipliers)


def _frequency_forms() -> list[str]:
    from ..methods import list_methods, method_class
    return [m if method_class(m).factor_rule == "at_least_one" else f"{m}:F"
            for m in list_methods("frequency")
            if getattr(method_class(m), "spec_usable", True)]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", help="a run directory written by `posenc train` or `posenc compare`",
                   type=path_arg)
    p.add_argument("--lengths", type=_int_list,
                   help=f"evaluation lengths, e.g. 128,256,512 (default: {multiples_of_L()})")
    p.add_argument("--stride", type=int, help="sliding windows with this stride (default: "
                   "non-overlapping windows)")
    p.add_argument("--max-tokens", type=int, default=65536,
                   help="tokens scored per length, from the start of the split (default "
                        "65536; 0 = the whole split)")
    p.add_argument("--split", default="test", choices=("validation", "test"))
    p.add_argument("--rope-scaling", help="a frequency method (RoPE runs only): "
                   f"{', '.join(_frequency_forms())}")
    p.add_argument("--logn", action="store_true", help="log-n attention scaling past L")
    p.add_argument("--entropy", action="store_true", help="also measure attention entropy")
    p.add_argument("--task", help="also measure accuracy on a synthetic task "
                   "(copy, reverse, addition, passkey)")
    p.add_argument("--task-examples", type=int, default=64)
    add_device_arguments(p)
    p.add_argument("--json", action="store_true", help="print the JSON written to RUN")


def load_checked_run(path: str, device: str = "auto"):
    """load_run with one-line errors for a missing directory or a directory without a run."""
    from ..train.checkpoint import load_run
    run_dir = Path(path)
    if not run_dir.exists():
        raise FileNotFoundError(f"run directory {run_dir} does not exist")
    if not run_dir.is_dir():
        raise NotADirectoryError(f"{run_dir} is not a directory")
    if not (run_dir / "config.json").exists():
        raise UserError(f"{run_dir} holds no run (no config.json); {_run_choices(run_dir)}")
    return run_dir, load_run(run_dir, resolve_device(device))


def _run_choices(folder: Path) -> str:
    """Which runs to give instead of ``folder``: those inside it when it is a `posenc compare`
    directory (or one encoding's folder of it), as paths from where the user stands (the
    folder as given, joined), else what a run directory is."""
    inner = sorted(p.parent.relative_to(folder).as_posix()
                   for p in folder.glob("runs/*/seed*/config.json"))
    inner = inner or sorted(p.parent.name for p in folder.glob("seed*/config.json"))
    if inner:
        paths = [(folder / p).as_posix() for p in inner]
        shown = ", ".join(paths[:8]) + (f", ... ({len(paths)} runs)" if len(paths) > 8 else "")
        return f"it holds runs of `posenc compare`: give one of {shown}"
    return ("give a directory written by `posenc train` or one of `posenc compare`'s "
            "runs/<encoding>/seed<k>")


def eval_file_name(label: str | None, setting: dict) -> str:
    """``eval[-<label>]-<8 hex digits of the setting>.json``."""
    digest = hashlib.sha256(json.dumps(setting, sort_keys=True).encode()).hexdigest()[:8]
    tag = "".join(c if c.isalnum() else "-" for c in label.replace(":", "")) + "-" \
        if label else ""
    return f"eval-{tag}{digest}.json"


def _fmt(x) -> str:
    if x is None:
        return "n/a"
    if isinstance(x, str):
        return x
    if isinstance(x, int):
        return str(x)
    return "inf" if not math.isfinite(x) else f"{x:.4g}"


def run(args: argparse.Namespace) -> int:
    from ..encodings.checks import require_distinct
    from ..runio import DirectoryLock
    require_distinct("lengths", args.lengths or ())
    run_dir = Path(args.run)
    if not run_dir.is_dir():
        return _evaluate(args)                       # reports the missing folder
    with DirectoryLock(run_dir, "posenc eval"):
        return _evaluate(args)


def _evaluate(args: argparse.Namespace) -> int:
    import torch

    from ..eval.entropy import entropy_at_lengths
    from ..eval.inference_scaling import InferenceScaling, apply_inference_scaling
    from ..eval.lengths import perplexity_at_lengths, position_limit, validate_lengths
    from ..eval.tasks import task_accuracy_at_lengths
    from ..runio import atomic_write
    run_dir, loaded = load_checked_run(args.run, args.device)
    tcfg = loaded.train_config
    scaling = InferenceScaling(args.rope_scaling, args.logn)
    model = apply_inference_scaling(loaded.model, scaling, tcfg.train_len)
    model = model.to(getattr(torch, args.dtype))
    lengths = validate_lengths(list(args.lengths or [tcfg.train_len * m
                                                     for m in DEFAULT_LENGTH_MULTIPLIERS]),
                              args.stride)
    limit = position_limit(model)
    past = [n for n in lengths if limit is not None and not limit.serves(n)]
    if past:
        raise UserError(f"length {past[0]} is past the {limit.kind} position {limit.bound} of "
                        f"this run ({limit.positions} positions, encoding {tcfg.model.pe!r}); "
                        f"use lengths <= {limit.positions}")
    if args.max_tokens is not None and args.max_tokens < 0:
        raise UserError(f"--max-tokens must be >= 0, got {args.max_tokens}")
    setting = {"steps": loaded.steps, "inference_scaling": scaling.label, "split": args.split,
               "stride": args.stride, "lengths": lengths, "max_tokens": args.max_tokens,
               "entropy": args.entropy, "task": args.task, "task_examples": args.task_examples,
               "dtype": args.dtype}
    path = run_dir / eval_file_name(scaling.label, setting)
    if path.exists() and not path.is_file():
        raise IsADirectoryError(f"cannot write {path}: it exists and is not a file")
    report = {"run": str(run_dir), "encoding": tcfg.model.pe,
              "options": dict(tcfg.model.pe_options), "train_len": tcfg.train_len,
              "steps": loaded.steps, "inference_scaling": scaling.label, "split": args.split,
              "stride": args.stride, "lengths": lengths, "setting": setting}
    rows = {n: {} for n in lengths}
    if tcfg.task is None:
        from ..data.cache import token_stream
        from ..data.corpora import load_corpus
        corpus = load_corpus(tcfg.data)
        if corpus.info() != loaded.corpus_info:
            raise UserError(f"the run's corpus ({loaded.corpus_info.get('name')}, sha256 "
                             f"{str(loaded.corpus_info.get('sha256'))[:12]}) differs from "
                             f"what {tcfg.data or 'stdlib'} gives now (sha256 "
                             f"{corpus.sha256[:12]}); its held-out split is not comparable")
        tokens = token_stream(corpus, loaded.tokenizer, args.split, tcfg.cache_dir)
        ppl = perplexity_at_lengths(model, tokens, lengths, stride=args.stride,
                                    max_tokens=args.max_tokens or None)
        report["corpus"] = corpus.info()
        report["ppl"] = {str(r.length): r.value for r in ppl}
        report["ppl_tokens"] = {str(r.length): r.n_tokens for r in ppl}
        for r in ppl:
            rows[r.length].update(ppl=r.value, tokens=r.n_tokens, seconds=r.seconds)
        if args.entropy:
            ent = entropy_at_lengths(model, tokens, lengths)
            report["entropy"] = {str(e.length): e.to_dict() for e in ent}
            for e in ent:
                rows[e.length].update(entropy=e.tail, uniform=e.uniform_tail)
    task = args.task or tcfg.task
    if task:
        acc = task_accuracy_at_lengths(model, task, lengths, n_examples=args.task_examples,
                                       seed=tcfg.seed + 1)
        report["task"] = task
        report["task_accuracy"] = {str(a.length): a.to_dict() for a in acc}
        for a in acc:
            rows[a.length].update(token_acc=a.token_accuracy, exact=a.exact_match)
    atomic_write(path, (json.dumps(report, indent=2) + "\n").encode())
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    cols = [k for k in ("ppl", "tokens", "entropy", "uniform", "token_acc", "exact", "seconds")
            if any(k in row for row in rows.values())]
    heads = {"ppl": "perplexity", "tokens": "tokens", "entropy": "entropy(tail)",
             "uniform": "uniform", "token_acc": "token acc", "exact": "exact match",
             "seconds": "seconds"}
    title = f"{run_dir} ({tcfg.model.pe}{'+' + scaling.label if scaling.label else ''}, " \
            f"trained at L={tcfg.train_len})"
    print(title)
    table = [["length"] + [heads[c] for c in cols]]
    for n in lengths:
        table.append([str(n) + (" (L)" if n == tcfg.train_len else "")]
                     + [_fmt(rows[n].get(c)) for c in cols])
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    for i, r in enumerate(table):
        print("  ".join(v.rjust(w) for v, w in zip(r, widths)))
        if i == 0:
            print("  ".join("-" * w for w in widths))
    print(f"wrote {path}")
    return 0
