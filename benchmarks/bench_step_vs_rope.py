"""One training step per encoding at a lab preset's shape, as a ratio to RoPE's in the same
round: forward, cross-entropy, backward and AdamW on one fixed batch of random ids, the
encodings in a rotated order each round after one untimed warm-up step each
(:func:`posenc.lab.compare.timing.time_training_steps`, what ``posenc compare`` records).

    .venv/bin/python -m benchmarks.bench_step_vs_rope --encodings path path_fox forget_gate \\
        --preset default --rounds 10 --threads 1
"""

from __future__ import annotations

import argparse
import statistics
from dataclasses import replace

import torch

from benchmarks.common import machine_line
from posenc import TransformerLM
from posenc.lab.compare.presets import PRESETS
from posenc.lab.compare.timing import time_training_steps


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--encodings", nargs="+", required=True)
    p.add_argument("--preset", default="default", choices=sorted(PRESETS))
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--vocab-size", type=int, default=256)
    p.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    config = PRESETS[args.preset]
    model = replace(config.model, vocab_size=args.vocab_size)
    names = ["rope"] + [e for e in args.encodings if e != "rope"]
    timing = time_training_steps(lambda e: TransformerLM(replace(model, pe=e)), names,
                                 config.train.batch_size, config.train.train_len,
                                 args.vocab_size, args.rounds)
    seconds = timing["step_seconds"]
    print(machine_line())
    print(f"preset {args.preset}: width {model.d_model}, {model.n_layers} layers, "
          f"{model.n_heads} heads, L = {config.train.train_len}, batch "
          f"{config.train.batch_size}; {args.rounds} rounds\n")
    print("| encoding | median ms | step / RoPE's (median, IQR) |\n|---|---:|---:|")
    for name in names:
        ratios = sorted(s / r for s, r in zip(seconds[name], seconds["rope"]))
        q1, _, q3 = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else ratios * 3
        print(f"| {name} | {1000 * statistics.median(seconds[name]):.1f} | "
              f"{statistics.median(ratios):.2f} ({q1:.2f}-{q3:.2f}) |")


if __name__ == "__main__":
    main()
