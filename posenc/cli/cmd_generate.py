"""``posenc generate RUN --prompt TEXT``: continue a prompt with a trained run, streaming the
text to stdout as the tokens are chosen (the prompt first, then the continuation, then a
newline; notes go to stderr)."""

from __future__ import annotations

import argparse
import random
import sys

from ..errors import UserError
from .args import check_seed, path_arg
from .devices import add_device_arguments

NAME = "generate"
HELP = ("continue a prompt with a trained run, printing the text as it is generated "
        "(sampled at temperature 0.8 with top-p 0.95 unless told otherwise; --temperature 0 "
        "is greedy)")

DEFAULT_NEW_TOKENS = 200


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", metavar="RUN_DIR", type=path_arg,
                   help="a run directory written by `posenc train`, or runs/<encoding>/seed<k> "
                        "inside a `posenc compare` directory")
    p.add_argument("--prompt", required=True, metavar="TEXT",
                   help="the text to continue (not empty)")
    p.add_argument("--max-new-tokens", type=int, metavar="N",
                   help=f"tokens to generate (default {DEFAULT_NEW_TOKENS}, or as many as a "
                        "learned position table still has room for); fewer if the "
                        "end-of-document token comes first")
    p.add_argument("--temperature", type=float, default=0.8, metavar="T",
                   help="divides the logits before sampling; 0 = greedy, the same text every "
                        "time (default 0.8: a little sharper than the model's distribution, "
                        "which small models need to stay on topic)")
    p.add_argument("--top-k", type=int, metavar="K",
                   help="sample among the K most probable tokens only (default: no limit)")
    p.add_argument("--top-p", type=float, default=0.95, metavar="P",
                   help="nucleus sampling: sample among the most probable tokens that hold "
                        "this much probability, in (0, 1]; 1 = no limit (default 0.95: drops "
                        "the long tail of unlikely tokens that derails a small model)")
    p.add_argument("--seed", type=int, metavar="S",
                   help="seed of the sampling, to get the same text again on the same device "
                        "(default: a fresh one, printed to stderr)")
    p.add_argument("--ignore-end", action="store_true",
                   help="go on past the end-of-document token (default: stop there)")
    add_device_arguments(p)


def run(args: argparse.Namespace) -> int:
    import torch

    from ..eval.generation import check_new_tokens, encode_prompt, generate_text, new_token_limit
    from ..models.generate import check_sampling
    from ..train.memory import check_generation_memory
    from .cmd_eval import load_checked_run
    check_sampling(args.temperature, args.top_k, args.top_p)     # before the slow load
    if args.max_new_tokens is not None and args.max_new_tokens < 1:
        raise UserError(f"--max-new-tokens must be >= 1, got {args.max_new_tokens}")
    check_seed("--seed", args.seed)
    if not args.prompt:
        raise UserError("--prompt is empty; give some text to continue")
    _, loaded = load_checked_run(args.run, args.device)
    model = loaded.model.to(getattr(torch, args.dtype))
    n_prompt = len(encode_prompt(loaded.tokenizer, args.prompt))
    max_new = args.max_new_tokens
    if max_new is None:
        max_new = new_token_limit(model, n_prompt, DEFAULT_NEW_TOKENS)
        if max_new < DEFAULT_NEW_TOKENS:
            note(f"generating {max_new} tokens: the learned position table of this run "
                 f"({model.config.pe!r}) ends there")
    check_new_tokens(model, n_prompt, max_new)
    check_generation_memory(model.config, 1, n_prompt, max_new, model.tok.weight.dtype,
                            model.tok.weight.device)
    seed = args.seed
    if seed is None and args.temperature > 0:
        seed = random.SystemRandom().randrange(2 ** 31)
        note(f"seed {seed} (pass --seed {seed} to get this text again)")

    def write(piece: str) -> None:
        sys.stdout.write(piece)
        sys.stdout.flush()

    write(args.prompt)
    result = generate_text(model, loaded.tokenizer, args.prompt, max_new,
                           temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
                           seed=seed, stop_at_end=not args.ignore_end, on_text=write)
    write("\n")
    if result.stopped_at_end:
        note(f"stopped at the end-of-document token after {len(result.new_ids)} tokens")
    return 0


def note(text: str) -> None:
    print(f"posenc generate: {text}", file=sys.stderr, flush=True)
