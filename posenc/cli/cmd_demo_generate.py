"""``posenc demo-generate``: a short greedy generation from a tiny random model per encoding."""

from __future__ import annotations

import argparse

import torch

from ..encodings import list_encodings
from ..models import LMConfig, TransformerLM

from .devices import add_device_arguments, resolve_device

NAME = "demo-generate"
HELP = "generate a few tokens with a tiny random model for each encoding (cached = full)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tokens", type=int, default=16, help="new tokens per encoding")
    p.add_argument("--seed", type=int, default=0)
    add_device_arguments(p)


def run(args: argparse.Namespace) -> int:
    device = resolve_device(args.device)
    prompt = torch.tensor([list(b"positions ")], device=device)
    for name in list_encodings():
        torch.manual_seed(args.seed)
        model = TransformerLM(LMConfig(pe=name, max_len=64, d_model=64, n_heads=4)).eval()
        model = model.to(device, getattr(torch, args.dtype))
        try:
            cached = model.generate(prompt, args.tokens)
            ids = prompt
            with torch.no_grad():                 # the same tokens without a cache
                for _ in range(args.tokens):
                    ids = torch.cat([ids, model(ids)[:, -1].argmax(-1, keepdim=True)], dim=1)
        except RuntimeError as err:               # e.g. an encoding that cannot run in bf16
            print(f"{name:<14} fails in {args.dtype} on {device}: "
                  f"{str(err).strip().splitlines()[0]}")
            continue
        same = "same" if torch.equal(ids, cached) else "DIFFERENT"
        print(f"{name:<14} cached vs full recompute: {same}  tokens: "
              f"{cached[0, prompt.shape[1]:].tolist()}")
    return 0
