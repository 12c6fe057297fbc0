"""``posenc train``: train a small LM with one positional encoding (DDP under torchrun)."""

from __future__ import annotations

import argparse
import os
from dataclasses import fields

import torch

from ..data.synthetic import TASKS
from ..errors import UserError
from ..models.lm import LMConfig
from ..study import CLI_NAMES
from ..train.config import TrainConfig, parse_options
from ..train.loop import resolve_vocab, train
from .args import check_seed, path_arg
from .devices import resolve_device
from .run_flags import add_run_flags

NAME = "train"
HELP = "train a small language model with one positional encoding"

#: command-line flag -> (dataclass field, type); defaults come from the dataclasses
MODEL_FLAGS = {"d_model": int, "n_layers": int, "n_heads": int, "d_ff": int, "dropout": float,
               "norm": str, "activation": str, "vocab_size": int}
TRAIN_FLAGS = {"batch_size": int, "steps": int, "lr": float, "warmup_steps": int,
               "weight_decay": float, "grad_clip": float, "seed": int, "eval_every": int,
               "eval_windows": int, "checkpoint_every": int, "min_lr_ratio": float,
               "skip_bad_steps": int}


def add_arguments(p: argparse.ArgumentParser) -> None:
    model_defaults = {f.name: f.default for f in fields(LMConfig)}
    train_defaults = {f.name: f.default for f in fields(TrainConfig)}
    p.add_argument("--out", required=True, type=path_arg, help="run directory to write (one "
                   "that holds this run resumes from its last checkpoint)")
    p.add_argument("--pe", default="rope", help="positional encoding (see `posenc list`)")
    p.add_argument("--pe-option", action="append", metavar="KEY=VALUE",
                   help="an encoding option, repeatable (e.g. --pe-option theta=500000)")
    p.add_argument("--train-len", type=int, default=train_defaults["train_len"],
                   help="training sequence length (also the model's max_len)")
    p.add_argument("--data", help="text file, folder of text files, dataset directory or "
                   "hf:NAME[:CONFIG] (default: the Python standard library source)", type=path_arg)
    p.add_argument("--tokenizer", default="byte", help="byte (default) or bpe:N")
    p.add_argument("--task", choices=TASKS, help="train on a synthetic task instead of text")
    p.add_argument("--pack", action="store_true",
                   help="train on packed documents: each document in a window restarts at "
                   "position 0 and attends only to itself, and the token after a document's "
                   "end is not predicted (default: a window is read as one text across "
                   "documents). Use it for corpora of many short documents, or to match "
                   "how the model will be used (one document at a time); text data only")
    p.add_argument("--cache-dir", help="token cache folder (default: posenc's cache folder, "
                   "$POSENC_CACHE_DIR or ~/.cache/posenc)", type=path_arg)
    add_run_flags(p, "training", deprecated=("--resume",))
    p.add_argument("--bf16", action="store_true", help="bfloat16 autocast (= --dtype "
                   "bfloat16)")
    p.add_argument("--dtype", choices=("float32", "bfloat16"),
                   help="compute dtype: bfloat16 autocasts, weights stay float32 (default: "
                   "float32)")
    p.add_argument("--device", default="auto", metavar="DEVICE",
                   help="auto (the CUDA GPU when there is one, else the CPU), cpu, cuda, "
                        "cuda:N, mps, xpu, ... (default auto)")
    p.add_argument("--backend", default="auto", help="attention backend while training")
    p.add_argument("--compile", action="store_true",
                   help="run the model's forward and backward through torch.compile (pays "
                   "for its compile time only in long runs: BENCHMARKS.md)")
    p.add_argument("--threads", type=int, help="CPU threads for torch (default: torch's "
                   "choice; 1 is faster on a busy machine)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    g = p.add_argument_group("model")
    for name, kind in MODEL_FLAGS.items():
        default = model_defaults[name]
        hint = "from the tokenizer" if name == "vocab_size" else default
        g.add_argument("--" + name.replace("_", "-"), type=kind, default=None,
                       help=f"default: {hint}")
    g = p.add_argument_group("optimization")
    for name, kind in TRAIN_FLAGS.items():
        hint = "steps // 10" if name == "warmup_steps" else train_defaults[name]
        if name == "skip_bad_steps":
            hint = "0: a non-finite loss or gradient stops the run (exit 3)"
        g.add_argument("--" + name.replace("_", "-"), type=kind, default=None,
                       help=f"default: {hint}")


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    """The TrainConfig the flags describe (model max_len = --train-len)."""
    if args.bf16 and args.dtype == "float32":
        raise UserError("--bf16 asks for bfloat16 but --dtype is float32; pass only one")
    model = {k: getattr(args, k) for k in MODEL_FLAGS if getattr(args, k) is not None}
    model = LMConfig(pe=args.pe, pe_options=parse_options(args.pe_option, "--pe-option"),
                     max_len=args.train_len, attn_backend=args.backend, **model)
    opts = {k: getattr(args, k) for k in TRAIN_FLAGS if getattr(args, k) is not None}
    cfg = TrainConfig(model=model, data=args.data, tokenizer=args.tokenizer,
                      train_len=args.train_len, task=args.task, cache_dir=args.cache_dir,
                      device=args.device, bf16=args.bf16 or args.dtype == "bfloat16",
                      pack=args.pack, compile=args.compile, **opts)
    return cfg if args.vocab_size is not None else resolve_vocab(cfg)


def run(args: argparse.Namespace) -> int:
    check_seed("--seed", args.seed)
    resolve_device(args.device)                 # a device this machine lacks: one line
    cfg = config_from_args(args)
    if args.threads is not None:
        if args.threads < 1:
            raise UserError(f"--threads must be >= 1, got {args.threads}")
        torch.set_num_threads(args.threads)
    result = train(cfg, args.out, overwrite=args.overwrite, progress=not args.no_progress,
                   names=CLI_NAMES)
    if int(os.environ.get("RANK", "0")) != 0:          # under torchrun, rank 0 reports
        return 0
    val = f", validation loss {result.val_loss:.4f}" if result.val_loss is not None else ""
    print(f"{cfg.model.pe}: {result.steps} steps, loss {result.final_loss:.4f}{val}, "
          f"{result.tokens_per_s:,.0f} tokens/s -> {result.run_dir}")
    return 0
