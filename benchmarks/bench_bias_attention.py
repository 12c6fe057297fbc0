"""Biased attention forward at long length: FlexAttention (score_mod) against sdpa with a
materialized bias, for ALiBi and T5.

    .venv/bin/python -m benchmarks.bench_bias_attention                 # n = 4096, B1 H8 D64
    .venv/bin/python -m benchmarks.bench_bias_attention --length 2048 --batch 2

Each candidate is ``posenc.attention.backends.attend(q, k, v, pe,
AttentionCall.for_positions(pos, pos, causal=True, backend=...))`` under
``torch.no_grad()``, fp32, so the bias (sdpa: gathered into an (1, H, n, n) tensor and
causally masked; flex: read from an (H, 2n-1) table inside the compiled kernel) is part of
the timed work. Flex is warmed up first; its one-time compile is reported separately: in a
fresh process with an empty inductor cache ("cold"), and in the timing process with the
default on-disk cache ("this run"). Peak memory comes from one fresh
subprocess per (encoding, backend) (see benchmarks/common.py).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time

import torch
import torch.nn.functional as F

from posenc.attention import AttentionCall
from posenc.attention.backends import attend
from posenc.encodings import build_encoding

from .common import compare, machine_line, peak_rss_delta_mib, run_child, steady_allocator

ENCODINGS = ("alibi", "t5")
BACKENDS = ("sdpa", "flex")


def _setup(encoding: str, args):
    torch.manual_seed(0)
    pe = build_encoding(encoding, n_heads=args.heads, head_dim=args.head_dim).eval()
    shape = (args.batch, args.heads, args.length, args.head_dim)
    q, k, v = (torch.randn(shape) for _ in range(3))
    pos = torch.arange(args.length)

    def run(backend: str):
        with torch.no_grad():
            call = AttentionCall.for_positions(pos, pos, causal=True, backend=backend)
            return attend(q, k, v, pe, call)[0]

    def no_bias():
        with torch.no_grad():
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    run.no_bias = no_bias
    return run


def _child(args) -> int:
    """Peak memory of one (encoding, backend) in this fresh process; prints one JSON line."""
    run = _setup(args.child[0], args)
    backend = args.child[1]
    start = time.perf_counter()
    run(backend)                                          # warm-up (compiles flex)
    warm_s = time.perf_counter() - start
    peak = peak_rss_delta_mib(lambda: run(backend))
    print(json.dumps({"peak_mib": peak, "first_call_s": warm_s}))
    return 0


def _common_args(args) -> list[str]:
    return ["--batch", str(args.batch), "--heads", str(args.heads), "--length",
            str(args.length), "--head-dim", str(args.head_dim)] + (
        ["--threads", str(args.threads)] if args.threads else [])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--length", type=int, default=4096)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                        help="cpu: process CPU time (use with --threads 1 on a loaded machine)")
    parser.add_argument("--allocator", choices=("steady", "default"), default="steady",
                        help="steady: glibc keeps large blocks in its heap (see common.py)")
    parser.add_argument("--encodings", nargs="+", default=list(ENCODINGS), choices=ENCODINGS)
    parser.add_argument("--child", nargs=2, metavar=("ENCODING", "BACKEND"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.child:
        return _child(args)                 # default allocator: freed memory leaves the RSS
    steady = args.allocator == "steady" and steady_allocator()

    print(f"command: python -m benchmarks.bench_bias_attention "
          f"{' '.join(sys.argv[1:] if argv is None else argv)}")
    print(f"machine: {machine_line()}")
    print(f"shape: B{args.batch} H{args.heads} n{args.length} D{args.head_dim} fp32, causal, "
          f"forward under no_grad; rounds: {args.rounds}; clock: {args.clock}; "
          f"allocator: {'steady' if steady else 'glibc default'}\n")
    print("| encoding | sdpa ms | flex ms | sdpa / flex time (median, IQR) | sdpa peak MiB | "
          "flex peak MiB | sdpa / flex peak | flex first call s, cold / this run |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    no_bias = None
    for encoding in args.encodings:
        with tempfile.TemporaryDirectory() as cold:           # empty inductor cache: full compile
            memory = {b: run_child("benchmarks.bench_bias_attention",
                                   _common_args(args) + ["--child", encoding, b],
                                   env={"TORCHINDUCTOR_CACHE_DIR": cold})
                      for b in BACKENDS}
        run = _setup(encoding, args)
        start = time.perf_counter()
        run("flex")
        warm_s = time.perf_counter() - start
        candidates = {b: (lambda b=b: run(b)) for b in BACKENDS}
        candidates["sdpa, no bias"] = run.no_bias
        result = compare(candidates, rounds=args.rounds, warmup=1, clock=args.clock)
        med, q1, q3 = result.ratio("sdpa", "flex")
        mem_ratio = memory["sdpa"]["peak_mib"] / max(memory["flex"]["peak_mib"], 1e-9)
        print(f"| {encoding} | {result.median_ms('sdpa'):.0f} | {result.median_ms('flex'):.0f} "
              f"| {med:.2f} ({q1:.2f}-{q3:.2f}) | {memory['sdpa']['peak_mib']:.0f} | "
              f"{memory['flex']['peak_mib']:.1f} | {mem_ratio:.0f} | "
              f"{memory['flex']['first_call_s']:.1f} / {warm_s:.1f} |", flush=True)
        no_bias = (result.median_ms("sdpa, no bias"), result.ratio("flex", "sdpa, no bias")[0])
    if no_bias is not None:
        print(f"\nFor scale: sdpa with no bias at all (is_causal) took {no_bias[0]:.0f} ms; "
              f"flex ({args.encodings[-1]}) / that = {no_bias[1]:.2f}.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
