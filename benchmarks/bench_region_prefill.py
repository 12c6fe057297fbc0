"""Prefill cost of the region methods (Self-Extend, ReRoPE, Leaky ReRoPE, Dual Chunk,
StreamingLLM) against plain sdpa, with the merged fused passes and the explicit scores.

    .venv/bin/python -m benchmarks.bench_region_prefill --threads 1 --clock cpu
    .venv/bin/python -m benchmarks.bench_region_prefill --contexts 4096 16384 --rounds 6 2

A tiny Hugging Face Llama (4 layers, hidden 256, 8 heads, 2 key heads, head_dim 32, original
context 256) runs one forward pass over ``context`` tokens without a cache. Plain: the model
as loaded (sdpa, causal). Each method: the same weights patched by
``posenc.hf.extend(model, method, context / 256)`` with the method's defaults, whose
attention runs ``blockwise_region_attention``: ``merged`` through
:func:`posenc.attention.region_flash.merged_region_attention` (one fused pass per region and
block, merged by log-sum-exp), ``explicit`` through the explicit fp32 scores of
``region_attention`` in blocks (``region_flash.MERGED = False``). Every candidate runs once per
round, in interleaved shuffled rounds; its figure is the median over rounds of its time over
plain's in the same round, with the interquartile range.
"""

from __future__ import annotations

import argparse
import sys

import torch

from posenc.attention import region_flash

from .bench_extension_methods import ORIGINAL, tiny_llama
from .common import compare, machine_line, steady_allocator

METHODS = ("self_extend", "rerope", "leaky_rerope", "dual_chunk", "streaming")


def candidates(context: int) -> dict:
    """name -> a closure running one prefill of ``context`` tokens."""
    from posenc.hf import extend
    ids = torch.randint(0, 256, (1, context), generator=torch.Generator().manual_seed(context))
    models = {"plain": tiny_llama()}
    for name in METHODS:
        models[name] = tiny_llama()
        extend(models[name], name, context / ORIGINAL)

    def run(model, merged: bool):
        @torch.no_grad()
        def prefill():
            region_flash.MERGED = merged
            try:
                return model(input_ids=ids, use_cache=False).logits
            finally:
                region_flash.MERGED = True
        return prefill
    out = {"plain": run(models["plain"], True)}
    for name in METHODS:
        out[f"{name} merged"] = run(models[name], True)
        out[f"{name} explicit"] = run(models[name], False)
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--contexts", type=int, nargs="+", default=[4096, 16384])
    p.add_argument("--rounds", type=int, nargs="+", default=[6, 2],
                   help="rounds per context (the last one repeats)")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--threads", type=int)
    p.add_argument("--clock", choices=("wall", "cpu"), default="wall")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    steady_allocator()
    print(f"# region methods, one prefill; {machine_line()}; clock {args.clock}")
    summary: dict[str, dict[int, str]] = {}
    for i, context in enumerate(args.contexts):
        rounds = args.rounds[min(i, len(args.rounds) - 1)]
        result = compare(candidates(context), rounds=rounds, warmup=args.warmup,
                         clock=args.clock)
        print(f"\n## prefill of {context} tokens, {rounds} rounds\n")
        print(result.table("plain"))
        for name in result.times:
            if name != "plain":
                med, q1, q3 = result.ratio(name, "plain")
                summary.setdefault(name, {})[context] = f"{med:.2f} ({q1:.2f}-{q3:.2f})"
        sys.stdout.flush()
    print("\n## summary: prefill time / plain sdpa prefill (median, IQR)\n")
    print("| | " + " | ".join(f"{c} tokens" for c in args.contexts) + " |")
    print("|---|" + "---:|" * len(args.contexts))
    for row, cells in summary.items():
        print(f"| {row} | " + " | ".join(cells.get(c, "") for c in args.contexts) + " |")


if __name__ == "__main__":
    sys.exit(main())
