"""RoPE apply on q and k against the memory floor (a plain copy) and Hugging Face's eager code.

    .venv/bin/python -m benchmarks.bench_rope                # B4 H8 T2048 D64, fp32
    .venv/bin/python -m benchmarks.bench_rope --strided      # q, k as views of a qkv projection

Candidates (each call handles q and k, shape (B, H, T, D)):

- ``copy``: ``torch.empty_like(x).copy_(x)`` for q and k; reads and writes the same bytes as an
  out-of-place rotation, so it is the memory floor and the baseline of every ratio.
- ``posenc half`` / ``posenc interleaved``: :func:`posenc.kernels.rotary.apply_rotary`
  (the native kernel when it is available).
- ``posenc half, cached stores``: the same kernel with streaming stores turned off.
- ``posenc half, per-sample angles``: the kernel with cos/sin (B, T, D/2), one row of angles
  per sequence (here the same positions in each, so the numbers match).
- ``posenc half, through the op``: the custom op ``torch.ops.posenc.rotary`` called eagerly,
  to weigh its dispatch against the direct ctypes call that eager ``apply_rotary`` makes.
- ``posenc reference``: the plain tensor-op formula the kernel is tested against.
- ``torch.compile(reference)``: the half-layout formula compiled by inductor;
  ``torch.compile(posenc op)``: the custom op compiled (an opaque call to the kernel); and
  ``torch.compile(posenc half)``: ``apply_rotary`` compiled, which traces one of the two
  (the op from ``rotary.COMPILED_OP_MIN_BYTES`` on). Compile time is printed, not timed.
- ``HF eager``: ``transformers.models.llama.modeling_llama.apply_rotary_pos_emb`` with HF's cos/sin
  layout (B, T, D), as ``LlamaRotaryEmbedding`` returns them.
"""

from __future__ import annotations

import argparse
import sys
import time

import torch

from posenc.kernels import rotary as rk
from posenc.kernels import rotary_native

from .common import compare, machine_line, steady_allocator


def _inputs(args):
    gen = torch.Generator().manual_seed(0)
    b, h, t, d = args.batch, args.heads, args.length, args.head_dim
    if args.strided:                                     # as MultiHeadAttention.heads makes them
        qkv = torch.randn(b, t, 3 * h * d, generator=gen)
        q, k = (z.view(b, t, h, d).transpose(1, 2) for z in qkv.chunk(3, dim=-1)[:2])
    else:
        q, k = torch.randn(2, b, h, t, d, generator=gen).unbind(0)
        q, k = q.contiguous(), k.contiguous()
    inv_freq = 1.0 / args.theta ** (torch.arange(0, d, 2, dtype=torch.float32) / d)
    angles = rk.rotary_angles(torch.arange(t), inv_freq)                  # (T, D/2)
    cos, sin = angles.cos(), angles.sin()
    emb = torch.cat((angles, angles), dim=-1)                             # (T, D)
    hf_cos = emb.cos()[None].repeat(b, 1, 1)                              # (B, T, D)
    hf_sin = emb.sin()[None].repeat(b, 1, 1)
    return q, k, cos, sin, hf_cos, hf_sin


def _without_streaming(fn):
    def run():
        saved, rotary_native.STREAM_MIN_BYTES = rotary_native.STREAM_MIN_BYTES, 1 << 62
        try:
            return fn()
        finally:
            rotary_native.STREAM_MIN_BYTES = saved
    return run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--length", type=int, default=2048)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--theta", type=float, default=10000.0)
    parser.add_argument("--strided", action="store_true",
                        help="q, k as (B, H, T, D) views of a (B, T, 3*H*D) projection")
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                        help="cpu: process CPU time (use with --threads 1 on a loaded machine)")
    parser.add_argument("--allocator", choices=("steady", "default"), default="steady",
                        help="steady: glibc keeps large blocks in its heap (see common.py)")
    parser.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    steady = args.allocator == "steady" and steady_allocator()
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    q, k, cos, sin, hf_cos, hf_sin = _inputs(args)
    status = rk.native_rotary_status()
    sample_cos = cos.expand(args.batch, *cos.shape).contiguous()          # (B, T, D/2)
    sample_sin = sin.expand(args.batch, *sin.shape).contiguous()
    op = torch.ops.posenc.rotary

    def posenc(layout):
        return lambda: (rk.apply_rotary(q, cos, sin, layout), rk.apply_rotary(k, cos, sin, layout))

    candidates = {
        "copy": lambda: (torch.empty_like(q).copy_(q), torch.empty_like(k).copy_(k)),
        "posenc half": posenc("half"),
        "posenc interleaved": posenc("interleaved"),
        "posenc half, cached stores": _without_streaming(posenc("half")),
        "posenc half, per-sample angles": lambda: (rk.apply_rotary(q, sample_cos, sample_sin),
                                                   rk.apply_rotary(k, sample_cos, sample_sin)),
        "posenc half, through the op": lambda: (op(q, cos, sin, "half"), op(k, cos, sin, "half")),
        "posenc reference": lambda: (rk.apply_rotary_reference(q, cos, sin),
                                     rk.apply_rotary_reference(k, cos, sin)),
        "HF eager": lambda: apply_rotary_pos_emb(q, k, hf_cos, hf_sin),
    }
    compile_s = None
    if not args.no_compile:
        compile_s = 0.0
        for name, fn in (("torch.compile(reference)", rk.apply_rotary_reference),
                         ("torch.compile(posenc op)", lambda x, c, s: op(x, c, s, "half")),
                         ("torch.compile(posenc half)", rk.apply_rotary)):
            compiled = torch.compile(fn, dynamic=False)
            start = time.perf_counter()
            compiled(q, cos, sin)
            compiled(k, cos, sin)
            compile_s += time.perf_counter() - start
            candidates[name] = (lambda c: lambda: (c(q, cos, sin), c(k, cos, sin)))(compiled)
    result = compare(candidates, rounds=args.rounds, clock=args.clock)

    shown = " ".join(sys.argv[1:] if argv is None else argv)
    print(f"command: python -m benchmarks.bench_rope {shown}")
    import transformers
    print(f"machine: {machine_line()}, transformers {transformers.__version__}")
    print(f"shape: B{args.batch} H{args.heads} T{args.length} D{args.head_dim} fp32, "
          f"{'strided views of qkv' if args.strided else 'contiguous'}; "
          f"native kernel: {status}; rounds: {args.rounds}; clock: {args.clock}; "
          f"allocator: {'steady' if steady else 'glibc default'}")
    if compile_s is not None:
        print(f"torch.compile first calls (compile): {compile_s:.1f} s")
    print()
    print(result.table("copy"))
    print()
    for name in ("posenc half", "posenc interleaved"):
        med, q1, q3 = result.ratio("HF eager", name)
        print(f"HF eager / {name}: {med:.2f}x (IQR {q1:.2f}-{q3:.2f})")
    med, q1, q3 = result.ratio("posenc half, through the op", "posenc half")
    extra_us = 500 * (result.median_ms("posenc half, through the op")      # 2 calls a round
                      - result.median_ms("posenc half"))
    print(f"through the op / direct: {med:.2f}x (IQR {q1:.2f}-{q3:.2f}), {extra_us:.1f} us "
          f"more per call (difference of the medians)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
