"""Per-step decode cost and peak memory of the region methods (Self-Extend, ReRoPE, Leaky
ReRoPE, Dual Chunk, StreamingLLM) against plain attention, in interleaved rounds.

    .venv/bin/python -m benchmarks.bench_extension_methods --threads 1 --clock cpu
    .venv/bin/python -m benchmarks.bench_extension_methods --contexts 1024 4096 --rounds 100

Two levels, each relative to plain attention at the same cached context:

- ``attention``: one query against ``context`` cached keys (8 heads, 2 key heads, head_dim
  64, fp32). Plain: PyTorch's sdpa on keys cached after rotation (Hugging Face's cache).
  Methods: :func:`posenc.attention.extension_methods.region_attention` on raw cached keys
  (each region rotates the keys of its span, so this includes the rotation of every key).
  StreamingLLM attends over its cache of sinks + window (= the original context) only.
- ``model``: one decode step of a tiny Hugging Face Llama (4 layers, hidden 256, 8 heads,
  2 key heads, original context 256) whose DynamicCache holds ``context`` tokens, patched by
  ``posenc.hf.extend`` (factor context / 256). The cache is cropped back after each step
  (StreamingLLM's stays at its size by itself).

Peak memory: one fresh subprocess per (method, context), the extra resident memory of one
model decode step (``benchmarks.common.peak_rss_delta_mib``).
"""

from __future__ import annotations

import argparse
import json
import sys

import torch
import torch.nn.functional as F

from posenc.attention.extension_methods import RotaryTable, region_attention
from posenc.methods import build_method

from .common import compare, machine_line, peak_rss_delta_mib, run_child, steady_allocator

METHODS = ("self_extend", "rerope", "leaky_rerope", "dual_chunk", "streaming")
ORIGINAL = 256
HEADS, KV_HEADS, DIM = 8, 2, 64
INV_FREQ = 1.0 / (10000.0 ** (torch.arange(0, DIM, 2).float() / DIM))
_rotate = RotaryTable(INV_FREQ)


def attention_candidates(context: int) -> dict:
    gen = torch.Generator().manual_seed(context)
    q = torch.randn(1, HEADS, 1, DIM, generator=gen)
    k = torch.randn(1, KV_HEADS, context, DIM, generator=gen)
    v = torch.randn(1, KV_HEADS, context, DIM, generator=gen)
    k_rot = _rotate(k, torch.arange(context))
    pos = torch.arange(context)
    scale = DIM ** -0.5

    def plain():
        qr = _rotate(q, pos[-1:])
        return F.scaled_dot_product_attention(qr, k_rot, v, scale=scale, enable_gqa=True)
    out = {"plain": plain}
    for name in METHODS:
        method = build_method(name, ORIGINAL, context / ORIGINAL)
        if name == "streaming":          # its cache: sinks + window, positions in the cache
            n = method.cache_size
            kk, vv, kp = k[:, :, :n], v[:, :, :n], torch.arange(n)
            qp, evicted = kp[-1:] + (context - n), context - n
            out[name] = (lambda m=method, kk=kk, vv=vv, kp=kp, qp=qp, e=evicted:
                         region_attention(q, kk, vv, m.regions(qp + 0, torch.where(
                             kp < m.sinks, kp, kp + e), e), _rotate, scale))
        else:
            out[name] = (lambda m=method: region_attention(q, k, v, m.regions(pos[-1:], pos),
                                                           _rotate, scale))
    return out


def tiny_llama():
    import transformers
    torch.manual_seed(0)
    config = transformers.LlamaConfig(hidden_size=256, intermediate_size=512,
                                      num_hidden_layers=4, num_attention_heads=HEADS,
                                      num_key_value_heads=KV_HEADS, vocab_size=256,
                                      max_position_embeddings=ORIGINAL,
                                      attn_implementation="sdpa")
    return transformers.AutoModelForCausalLM.from_config(config).eval()


def model_step(method: str, context: int):
    """A closure running one cached decode step after ``context`` tokens."""
    import transformers

    from posenc.hf import extend
    model = tiny_llama()
    if method != "plain":
        extend(model, method, context / ORIGINAL)
    gen = torch.Generator().manual_seed(context)
    ids = torch.randint(0, 256, (1, context + 1), generator=gen)
    cache = transformers.DynamicCache(config=model.config)
    with torch.no_grad():
        model(input_ids=ids[:, :context], cache=cache, use_cache=True)

    @torch.no_grad()
    def step():
        out = model(input_ids=ids[:, context:], cache=cache, use_cache=True).logits
        if method != "streaming":
            cache.crop(-1)
        return out
    return step


def child(args) -> None:
    torch.set_num_threads(1)
    step = model_step(args.child, args.context)
    step()
    print(json.dumps({"peak_mib": peak_rss_delta_mib(step)}))


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--contexts", type=int, nargs="+", default=[1024, 4096])
    p.add_argument("--rounds", type=int, default=60)
    p.add_argument("--threads", type=int)
    p.add_argument("--clock", choices=("wall", "cpu"), default="wall")
    p.add_argument("--no-memory", action="store_true")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--context", type=int, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        return child(args)
    if args.threads:
        torch.set_num_threads(args.threads)
    steady_allocator()
    print(f"# region methods, one decode step; {machine_line()}; clock {args.clock}")
    summary: dict[str, dict[int, str]] = {}
    for context in args.contexts:
        for level, candidates in (("attention", attention_candidates(context)),
                                  ("model", {m: model_step(m, context)
                                             for m in ("plain", *METHODS)})):
            result = compare(candidates, rounds=args.rounds, clock=args.clock)
            print(f"\n## {level}, context {context}\n")
            print(result.table("plain"))
            for name in METHODS:
                med, q1, q3 = result.ratio(name, "plain")
                summary.setdefault(f"{level}: {name}", {})[context] = \
                    f"{med:.2f} ({q1:.2f}-{q3:.2f})"
        if not args.no_memory:
            for name in ("plain", *METHODS):
                peak = run_child("benchmarks.bench_extension_methods",
                                 ["--child", name, "--context", str(context)])["peak_mib"]
                summary.setdefault(f"peak MiB of a model step: {name}", {})[context] = \
                    f"{peak:.1f}"
    print("\n## summary: time / plain (median, IQR) and peak memory\n")
    print("| | " + " | ".join(f"context {c}" for c in args.contexts) + " |")
    print("|---|" + "---:|" * len(args.contexts))
    for row, cells in summary.items():
        print(f"| {row} | " + " | ".join(cells.get(c, "") for c in args.contexts) + " |")


if __name__ == "__main__":
    sys.exit(main())
