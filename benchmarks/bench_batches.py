"""Cost of real batches: a training step on a padded or a packed batch against the same
shape unpadded, per encoding, in one run.

    .venv/bin/python -m benchmarks.bench_batches
    .venv/bin/python -m benchmarks.bench_batches --encodings rope alibi t5 --threads 1 --clock cpu

A candidate is one training step of a ``TransformerLM`` (4 layers, d_model 256, 4 heads,
L = 256, batch 8, fp32, CPU): forward, cross-entropy, backward. ``unpadded`` runs plain
windows; ``left`` and ``right`` the same shape as a left- or right-padded batch (each row
0-96 padding tokens, ``attention_mask``: positions count real tokens, padding hidden from
every query); ``packed`` the same shape with 2-5 documents packed into each row
(``document_ids``: positions restart per document, attention block-diagonal). Figures:
median over interleaved rounds of (time / unpadded's time of the same encoding in the same
round).
"""

from __future__ import annotations

import argparse
import sys

import torch
import torch.nn.functional as F

from posenc import LMConfig, TransformerLM

from .common import compare, machine_line

DEFAULT_ENCODINGS = ("rope", "alibi", "t5", "nope")
#: the batches timed against the unpadded one
PADDED = ("left", "right", "packed")


def batch_inputs(batch: int, length: int, seed: int = 0):
    """ids (B, L), left- and right-padding masks and packed document ids for the same
    shape."""
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 256, (batch, length), generator=gen)
    pads = torch.randint(0, 97, (batch,), generator=gen)
    left = torch.arange(length)[None, :] >= pads[:, None]
    right = torch.arange(length)[None, :] < length - pads[:, None]
    documents = torch.zeros(batch, length, dtype=torch.long)
    for row in range(batch):
        n_docs = int(torch.randint(2, 6, (1,), generator=gen))
        cuts = torch.randperm(length - 1, generator=gen)[:n_docs - 1] + 1
        documents[row] = torch.bucketize(torch.arange(length), cuts.sort().values, right=True)
    return ids, left, right, documents


def make_step(name: str, args, kind: str):
    torch.manual_seed(0)
    model = TransformerLM(LMConfig(vocab_size=256, d_model=args.d_model, n_layers=args.layers,
                                   n_heads=args.heads, max_len=args.length, pe=name)).train()
    ids, left, right, documents = batch_inputs(args.batch, args.length)
    extra = {"unpadded": {}, "left": {"attention_mask": left},
             "right": {"attention_mask": right}, "packed": {"document_ids": documents}}[kind]

    def step():
        model.zero_grad(set_to_none=True)
        logits = model(ids, **extra)
        loss = F.cross_entropy(logits.flatten(0, 1), ids.roll(-1, 1).flatten())
        loss.backward()
        return loss

    return step


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--encodings", nargs="+", default=list(DEFAULT_ENCODINGS))
    parser.add_argument("--length", type=int, default=256)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    kinds = ("unpadded", *PADDED)
    candidates = {f"{name} {kind}": make_step(name, args, kind)
                  for name in args.encodings for kind in kinds}
    result = compare(candidates, rounds=args.rounds, warmup=args.warmup, clock=args.clock)
    print(f"# training step: L={args.length} B={args.batch} d_model={args.d_model} "
          f"layers={args.layers} heads={args.heads} fp32, {args.rounds} rounds, "
          f"{args.clock} clock")
    print(f"# {machine_line()}")
    print("| encoding | unpadded ms | " + " | ".join(f"{kind} / unpadded (IQR)"
                                                  for kind in PADDED) + " |")
    print("|---|---:|" + "---:|" * len(PADDED))
    for name in args.encodings:
        base = f"{name} unpadded"
        cells = []
        for kind in PADDED:
            med, q1, q3 = result.ratio(f"{name} {kind}", base)
            cells.append(f"{med:.3f} ({q1:.2f}-{q3:.2f})")
        print(f"| {name} | {result.median_ms(base):.1f} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
