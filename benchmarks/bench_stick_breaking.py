"""One training step with stick-breaking attention against RoPE's softmax at the default
preset's shape.

A step is forward, cross-entropy, backward and an AdamW step on one fixed batch of random byte
ids (:func:`benchmarks.bench_train_step.make_step`, eager). Candidates, each a
``TransformerLM`` from the same seed at the shape of ``posenc compare``'s default preset
(width 64, 2 layers, 2 heads, L = 64, batch 32):

- ``rope``: RoPE with the softmax (SDPA), the baseline;
- ``alibi``: ALiBi's bias (posenc's fused CPU attention), the softmax run the claim compares
  with;
- ``stick_breaking``: NoPE with stick-breaking attention (the lab's variant);
- ``stick_breaking+rope``: RoPE with stick-breaking attention.

One thread, CPU clock of the process (time slices lost to other processes do not count), in
interleaved rounds (:func:`benchmarks.common.compare`).

    .venv/bin/python -m benchmarks.bench_stick_breaking --rounds 30
"""

from __future__ import annotations

import argparse

import torch

from benchmarks.bench_train_step import make_step
from benchmarks.common import compare, machine_line
from posenc import LMConfig, TransformerLM

CANDIDATES = {"rope": ("rope", "softmax"), "alibi": ("alibi", "softmax"),
              "stick_breaking": ("nope", "stick_breaking"),
              "stick_breaking+rope": ("rope", "stick_breaking")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--d-model", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--heads", type=int, default=2)
    parser.add_argument("--train-len", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()
    torch.set_num_threads(1)
    ids = torch.randint(0, 256, (args.batch_size, args.train_len + 1),
                        generator=torch.Generator().manual_seed(0))
    steps = {}
    for name, (pe, form) in CANDIDATES.items():
        torch.manual_seed(0)
        model = TransformerLM(LMConfig(vocab_size=256, d_model=args.d_model,
                                       n_layers=args.layers, n_heads=args.heads,
                                       max_len=args.train_len, pe=pe, attn_form=form))
        step = make_step(model, fused=False)
        steps[name] = lambda step=step: step(ids)
    result = compare(steps, rounds=args.rounds, clock="cpu")
    print(machine_line())
    print(f"shape: d_model {args.d_model}, {args.layers} layers, {args.heads} heads, "
          f"L {args.train_len}, batch {args.batch_size}; {args.rounds} rounds, 1 thread")
    print(result.table("rope"))


if __name__ == "__main__":
    main()
