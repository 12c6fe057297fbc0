"""Forward + backward time of one attention layer for every registered encoding, relative to
``nope`` in the same run.

    .venv/bin/python -m benchmarks.bench_layer                    # L256 B8 d256 H4, causal
    .venv/bin/python -m benchmarks.bench_layer --threads 1 --clock cpu   # on a loaded machine
    .venv/bin/python -m benchmarks.bench_layer --encodings nope t5 shaw --bidirectional

A candidate is one training step of a single layer, the way ``TransformerLM`` runs it: the
encoding's ``embed`` on the input (B, L, C) (it runs once per model, so for absolute encodings
this is an upper bound of their per-layer cost), then ``MultiHeadAttention`` (qkv projection,
``transform_qk``, the implementation ``auto`` picks for training on the CPU: sdpa, or posenc's
fused attention for a bias or a value term; bias, value term, output projection), then backward of
a fixed output gradient into the input and every parameter of the layer and the encoding.
fp32, dropout 0, default options for every encoding (``bidirectional=True`` where the option
exists with ``--bidirectional``). ``nope@eager`` is nope forced onto the eager backend: it
shows how much of an eager-only encoding's figure is the backend itself.

Every encoding in the registry is timed; one that cannot be built with default options is
listed as skipped with the reason. Rounds are interleaved and shuffled (benchmarks/common.py);
figures are medians over rounds of (time / nope's time in the same round).
"""

from __future__ import annotations

import argparse
import sys

import torch

from posenc.attention import AttentionContext, MultiHeadAttention, RoutingFacts, choose_backend
from posenc.encodings import build_encoding, encoding_options, list_encodings

from .common import compare, machine_line

BASELINE = "nope"
#: speed targets (time / nope, one layer, forward + backward, L = 256, CPU)
TARGETS = {"t5": 1.25, "shaw": 1.4, "xl": 1.4, "deberta": 1.5}
#: options an encoding may need from its model and declare without a default
CONTEXT_OPTIONS = ("vocab_size",)


def build_options(name: str, args) -> dict:
    """Default options, plus what the model would supply (vocab_size) and the direction."""
    declared = encoding_options(name)
    options = {key: args.vocab_size for key in CONTEXT_OPTIONS
               if key in declared and declared[key] is None}
    if args.bidirectional and "bidirectional" in declared:
        options["bidirectional"] = True
    return options


def make_step(name: str, args, backend: str = "auto"):
    """A closure running forward + backward of one layer; also returns the backend used."""
    torch.manual_seed(0)
    d_model, length = args.d_model, args.length
    pe = build_encoding(name, n_heads=args.heads, head_dim=d_model // args.heads,
                        max_len=length, **build_options(name, args))
    attn = MultiHeadAttention(d_model, args.heads)
    pe.train()
    attn.train()
    params = [*attn.parameters(), *pe.parameters()]
    x = torch.randn(args.batch, length, d_model, requires_grad=True)
    ids = torch.randint(0, args.vocab_size, (args.batch, length))
    grad_out = torch.randn(args.batch, length, d_model)
    pos = torch.arange(length)
    causal = not args.bidirectional
    used = choose_backend(pe.backends(), pe.has_bias, RoutingFacts(
        requested=backend, device_type="cpu", dtype=torch.float32, grad=True, q_len=length,
        k_len=length))
    ctx = AttentionContext(pos, causal=causal, consecutive=True, backend=backend)

    def step():
        for p in (x, *params):
            p.grad = None
        h = pe.embed(x, pos, ids=ids)
        out, _ = attn(h, ctx, pe)
        out.backward(grad_out)
        return out

    return step, used


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--length", type=int, default=256)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--vocab-size", type=int, default=256,
                        help="for encodings that depend on token ids")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                        help="cpu: process CPU time (use with --threads 1 on a loaded machine)")
    parser.add_argument("--bidirectional", action="store_true",
                        help="encoder-style layer: no causal mask, bidirectional=True options")
    parser.add_argument("--encodings", nargs="+", default=None,
                        help=f"subset to time (default: every registered encoding); "
                             f"{BASELINE} is always included")
    args = parser.parse_args(argv)
    if args.d_model % args.heads:
        parser.error(f"--heads {args.heads} must divide --d-model {args.d_model}")
    if args.threads:
        torch.set_num_threads(args.threads)
    names = args.encodings or list_encodings()
    unknown = sorted(set(names) - set(list_encodings()))
    if unknown:
        parser.error(f"unknown encoding(s) {', '.join(unknown)}; valid: "
                     f"{', '.join(list_encodings())}")
    names = [BASELINE] + [n for n in names if n != BASELINE]

    candidates, notes, skipped = {}, {}, {}
    for name in names:
        try:
            step, used = make_step(name, args)
        except (ValueError, TypeError) as err:
            skipped[name] = str(err)
            continue
        candidates[name] = step
        target = f"; target <= {TARGETS[name]}" if name in TARGETS else ""
        notes[name] = used + target
    candidates[f"{BASELINE}@eager"], _ = make_step(BASELINE, args, backend="eager")
    notes[f"{BASELINE}@eager"] = "eager (reference)"

    result = compare(candidates, rounds=args.rounds, warmup=args.warmup, clock=args.clock)
    direction = "bidirectional" if args.bidirectional else "causal"
    print(f"# one attention layer, forward + backward: L={args.length} B={args.batch} "
          f"d_model={args.d_model} heads={args.heads} fp32 {direction}, {args.rounds} rounds, "
          f"{args.clock} clock")
    print(f"# {machine_line()}")
    print(result.table(BASELINE, notes))
    for name, reason in skipped.items():
        print(f"skipped {name}: {reason}")
    for name, limit in TARGETS.items():
        if name in candidates:
            ratio = result.ratio(name, BASELINE)[0]
            verdict = "met" if ratio <= limit else "MISSED"
            print(f"target {name}: {ratio:.3f} <= {limit}: {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
