"""``posenc demo-generate``: a few sampled tokens per encoding from a tiny random model, drawn
once with the KV cache and once recomputing the whole sequence at every step.

Both draws use a generator seeded the same way, so they pick the same tokens exactly when the
cached and the recomputed logits agree; sampling (not greedy decoding, which a random model
answers by repeating a token) makes the tokens vary, so the comparison checks something.
Exit status 1 when an encoding fails or differs.
"""

from __future__ import annotations

import argparse
import sys

import torch

from ..encodings import list_encodings
from ..errors import UserError
from ..models import LMConfig, TransformerLM
from ..models.generate import select_next
from .args import check_seed
from .devices import add_device_arguments, resolve_device

NAME = "demo-generate"
HELP = ("sample a few tokens with a tiny random model for each encoding, with the KV cache "
        "and recomputing everything (they must be the same)")

PROMPT = b"positions "
#: the demo models' length: their learned position tables hold this many positions
DEMO_MAX_LEN = 64
#: n new tokens run a model at positions 0 .. len(PROMPT) + n - 2
MAX_TOKENS = DEMO_MAX_LEN - len(PROMPT) + 1
TEMPERATURE = 1.0


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tokens", type=int, default=16,
                   help=f"new tokens per encoding, 1..{MAX_TOKENS} (default 16)")
    p.add_argument("--seed", type=int, default=0,
                   help="seed of the models' weights and of the sampling (default 0)")
    add_device_arguments(p)


def sample_both_ways(model: TransformerLM, prompt: torch.Tensor, n: int,
                     seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` tokens after prompt (1, P) drawn with the KV cache and by full recomputation,
    each with a generator seeded ``seed`` -> two (1, P + n) tensors."""
    device = prompt.device
    cached = model.generate(prompt, n, temperature=TEMPERATURE,
                            generator=torch.Generator(device=device).manual_seed(seed))
    generator = torch.Generator(device=device).manual_seed(seed)
    ids = prompt
    with torch.no_grad():
        for _ in range(n):
            nxt = select_next(model(ids)[:, -1], TEMPERATURE, generator=generator)
            ids = torch.cat([ids, nxt], dim=1)
    return cached, ids


def run(args: argparse.Namespace) -> int:
    if not 1 <= args.tokens <= MAX_TOKENS:
        raise UserError(f"--tokens must be between 1 and {MAX_TOKENS}, got {args.tokens}: "
                        f"the demo models serve {DEMO_MAX_LEN} positions and the prompt "
                        f"takes {len(PROMPT)}")
    check_seed("--seed", args.seed)
    device = resolve_device(args.device)
    prompt = torch.tensor([list(PROMPT)], device=device)
    bad = []
    for name in list_encodings():
        torch.manual_seed(args.seed)
        model = TransformerLM(LMConfig(pe=name, max_len=DEMO_MAX_LEN, d_model=64,
                                       n_heads=4)).eval()
        model = model.to(device, getattr(torch, args.dtype))
        try:
            cached, full = sample_both_ways(model, prompt, args.tokens, args.seed)
        except RuntimeError as err:               # e.g. an encoding that cannot run in bf16
            print(f"{name:<14} fails in {args.dtype} on {device}: "
                  f"{str(err).strip().splitlines()[0]}", flush=True)
            bad.append(name)
            continue
        same = torch.equal(full, cached)
        if not same:
            bad.append(name)
        print(f"{name:<14} cached vs full recompute: {'same' if same else 'DIFFERENT'}  "
              f"tokens: {cached[0, prompt.shape[1]:].tolist()}", flush=True)
    if bad:
        print(f"posenc demo-generate: {len(bad)} of {len(list_encodings())} encodings failed "
              f"or differed: {', '.join(bad)}", file=sys.stderr)
        return 1
    return 0
