"""``posenc lm-eval run --model posenc ...``: lm-eval's command line with posenc's model.

lm-eval 0.4 finds a ``--model`` name only in its own registry and reads no plugins, so
``lm-eval --model posenc`` cannot know posenc's model; this command registers it
(:mod:`posenc.hf.lm_eval_model`) and then runs lm-eval's own command line with the
arguments given after ``lm-eval``, unchanged.
"""

from __future__ import annotations

import argparse
import importlib.util

from ..errors import UserError

NAME = "lm-eval"
HELP = ("run lm-evaluation-harness with posenc's model registered: `posenc lm-eval run "
        "--model posenc --model_args pretrained=smollm2,method=yarn,factor=4 --tasks ...` "
        "is `lm-eval run ...` with every method of `posenc extend`")
#: lm-eval's own commands (0.4.10 and later)
LM_EVAL_COMMANDS = ("run", "ls", "validate")
LMEVAL_INSTALL = "pip install 'posenc[lmeval]'"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = (
        f"{HELP}. The posenc model's model_args: pretrained (smollm2, a .gguf file, a model "
        "directory or a hub name), method (a method spec, `posenc list`), factor, original "
        "(the pretraining context), the method's options by name (window=...,group=...), "
        "dtype (float32, float16, bfloat16, float64), device, attn_implementation, "
        "gguf_cache (false: do not keep the dequantized GGUF); the rest go to lm-eval's hf "
        "model (batch_size, max_length, ...). `posenc lm-eval run --help` prints lm-eval's "
        "own help.")
    p.add_argument("lm_eval_command", type=lm_eval_command, metavar="COMMAND",
                   help=f"lm-eval's command: {', '.join(LM_EVAL_COMMANDS)}")
    p.add_argument("lm_eval_args", nargs=argparse.REMAINDER, metavar="ARGS",
                   help="lm-eval's arguments, as `lm-eval COMMAND` takes them")


def lm_eval_command(text: str) -> str:
    """``text`` if it is one of lm-eval's commands; else the usage error says what comes
    first."""
    if text not in LM_EVAL_COMMANDS:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not one of lm-eval's commands ({', '.join(LM_EVAL_COMMANDS)}), which "
            "comes first: posenc lm-eval run --model posenc --model_args ... --tasks ...")
    return text


def run(args: argparse.Namespace) -> int:
    if importlib.util.find_spec("lm_eval") is None:
        raise UserError(f"posenc lm-eval needs lm-eval, not installed: {LMEVAL_INSTALL}")
    from ..hf.lm_eval_model import run_lm_eval
    return run_lm_eval([args.lm_eval_command, *args.lm_eval_args])
