"""A long forward of SmolLM2-135M with each context-extension method: time and peak memory
of a 2x-native (16k-token) forward relative to a native (8k-token) forward in the same run.

    .venv/bin/python -m benchmarks.bench_extend                       # smollm2, 8192 vs 16384
    .venv/bin/python -m benchmarks.bench_extend --short 2048 --long 4096 --methods none,yarn

Each forward is what ``posenc extend`` runs for perplexity: ``model(ids, use_cache=False)``
under ``torch.no_grad()``, fp32, logits for every position, sdpa attention with no mask (the
fused causal kernel). Before each method a 128-token warm-up forward runs. The clock is the
process CPU time (``--clock cpu``, default; with one thread it discounts time slices lost to
other processes) and wall time is printed next to it. Peak memory is the rise of the
kernel's high-water mark (VmHWM, reset right before the call) over the resident size before
it. Quadratic attention predicts a 16k / 8k time ratio between 2 (linear parts dominate) and
4 (attention dominates); the memory ratio should stay near 2 (logits and activations are
linear in length; no (T, T) matrix is held).
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from posenc.hf import extend, load_model, restore
from posenc.hf.measure import check_memory

from .common import machine_line, peak_rss_delta_mib

METHODS = ("none", "linear", "ntk", "dynamic", "yarn", "yarn+logn", "dynamic+exact")


def _forward(model, ids: torch.Tensor) -> dict:
    with torch.no_grad():
        wall, cpu = time.perf_counter(), time.process_time()
        out = model(input_ids=ids, use_cache=False).logits
        return {"cpu_s": time.process_time() - cpu, "wall_s": time.perf_counter() - wall,
                "logits_shape": list(out.shape)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="smollm2")
    p.add_argument("--methods", default=",".join(METHODS))
    p.add_argument("--factor", type=float, default=2.0)
    p.add_argument("--short", type=int, default=8192)
    p.add_argument("--long", type=int, default=16384)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--clock", choices=("cpu", "wall"), default="cpu")
    p.add_argument("--gguf-cache", default=None,
                   help="a folder to keep the dequantized GGUF model in (default: none); "
                        "posenc.hf.load.default_gguf_cache() is the one posenc extend uses")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    print(machine_line(), flush=True)
    start = time.perf_counter()
    loaded = load_model(args.model, gguf_cache=args.gguf_cache)
    model = loaded.model
    print(f"loaded {args.model} in {time.perf_counter() - start:.0f} s", flush=True)
    check_memory(model.config, args.long)
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, model.config.vocab_size, (1, args.long), generator=gen)
    key = "cpu_s" if args.clock == "cpu" else "wall_s"
    rows = {}
    for method in args.methods.split(","):
        factor = None if method.split("+")[0] in ("none", "logn") else args.factor
        extend(model, method, factor)
        try:
            _forward(model, ids[:, :128])                   # warm-up
            row = {}
            for name, n in (("short", args.short), ("long", args.long)):
                res = {}
                res["peak_mib"] = peak_rss_delta_mib(lambda n=n: res.update(
                    _forward(model, ids[:, :n])))
                row[name] = res
                print(f"{method:>14} {n:>6} tokens: {res[key]:7.1f} s ({args.clock}), "
                      f"{res['wall_s']:7.1f} s wall, peak +{res['peak_mib']:.0f} MiB",
                      flush=True)
            rows[method] = row
        finally:
            restore(model)
    cfg = model.config
    scores_mib = cfg.num_attention_heads * args.long ** 2 * 4 / 2**20
    print(f"\none layer's (H, T, T) fp32 scores at {args.long} tokens would take "
          f"{scores_mib:.0f} MiB\n")
    base = rows.get("none", next(iter(rows.values())))
    print(f"| method | {args.short} tok s | {args.long} tok s | time {args.long}/{args.short} "
          f"| {args.long} tok time / none | peak MiB {args.short} | peak MiB {args.long} | "
          f"memory {args.long}/{args.short} |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for method, row in rows.items():
        s, lg = row["short"], row["long"]
        print(f"| {method} | {s[key]:.1f} | {lg[key]:.1f} | {lg[key] / s[key]:.2f} | "
              f"{lg[key] / base['long'][key]:.2f} | {s['peak_mib']:.0f} | "
              f"{lg['peak_mib']:.0f} | {lg['peak_mib'] / max(s['peak_mib'], 1):.2f} |")
    print(json.dumps({"machine": machine_line(), "args": vars(args), "rows": rows}))


if __name__ == "__main__":
    main()
