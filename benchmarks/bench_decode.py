"""Per-token cost of cached decoding against the context length, per encoding, relative to
RoPE at the same context in the same run.

    .venv/bin/python -m benchmarks.bench_decode                       # 256 1024 2048 4096
    .venv/bin/python -m benchmarks.bench_decode --contexts 2048 --encodings rope alibi t5

A candidate is one decode step of a ``TransformerLM`` (4 layers, d_model 256, 4 heads, fp32,
batch 1, no gradients) whose KV caches already hold ``context`` tokens: embedding, every
layer's hooks and attention over the cached keys, and the logits of the new token. After
each timed step the caches are rolled back to ``context`` tokens, so every round times the
same step. The prefill that fills the caches is not timed.

Dynamic NTK past its original length recomputes the cached history when its frequencies
change. Under the per-token schedule that is every step, so its step time is its per-token
cost. Under the stepped schedule (the default) it happens when the length crosses
``original * 2^k``; its figure is the amortized cost of a token in a generation that reaches
``context`` (a threshold): the steady step (at ``context - 1`` cached tokens, which crosses
nothing) plus one recompute of ``context`` tokens (timed as a prefill) spread over the
``context / 2`` tokens since the previous threshold. Both parts are printed.

Options and plans are candidates too: RoPE with ``partial`` (p-RoPE) or Llama 4's attention
temperature, and models with a layer plan (``plan:gemma3``: every layer of a 4-layer model is
a 512-token sliding window, Gemma 3's local layers; ``plan:llama4``: three 512-token chunked
RoPE layers and one full NoPE layer). A windowed layer's rolling cache moves its held window
by one token on every append, so the roll-back after a timed step copies that window back
(one copy of at most 511 tokens' keys and values per layer, inside the timed step).
"""

from __future__ import annotations

import argparse
import sys

import torch

from posenc import LMConfig, TransformerLM
from posenc.encodings import list_encodings

from .common import compare, machine_line

BASELINE = "rope"
#: encodings timed by default: every distance bias, the rotary family and the absolute ones
DEFAULT_ENCODINGS = ("nope", "rope", "xpos", "alibi", "t5", "kerple", "fire", "learned",
                     "sinusoidal", "cope", "dynamic_bias", "forget_gate", "pope", "mrope",
                     "axial_rope")
#: (label, encoding, options, plan) of the option and plan candidates
VARIANTS = {
    "rope+partial=0.5": ("rope", {"partial": 0.5}, None),
    "rope+temperature": ("rope", {"temperature_floor": 8192, "temperature_scale": 0.1}, None),
    "plan:gemma3": ("rope", {}, {"name": "gemma3", "window": 512}),
    "plan:llama4": ("rope", {}, {"name": "llama4", "chunk": 512}),
}
#: (label, rope scaling) of the length-dependent candidates
SCALINGS = {
    "rope+dynamic": {"rope_type": "dynamic", "factor": 2.0},
    "rope+dynamic/per_token": {"rope_type": "dynamic", "factor": 2.0, "schedule": "per_token"},
}
#: the stepped candidate: its steady step and its recompute make the amortized figure
STEPPED = "rope+dynamic"


def build(name: str, args, scaling: dict | None = None, options: dict | None = None,
          plan: dict | None = None) -> TransformerLM:
    torch.manual_seed(0)
    options = dict(options or {})
    if scaling is not None:
        options["scaling"] = {**scaling, "original_max_position_embeddings": args.original_length}
    config = LMConfig(vocab_size=256, d_model=args.d_model, n_layers=args.layers,
                      n_heads=args.heads, max_len=max(args.contexts) + 8, pe=name,
                      pe_options=options, plan=plan)
    return TransformerLM(config).eval()


def decode_step(model: TransformerLM, context: int):
    """A closure timing one cached step after ``context`` tokens; caches rolled back after."""
    gen = torch.Generator().manual_seed(context)
    ids = torch.randint(0, 256, (1, context), generator=gen)
    caches = model.make_caches(1, context + 1)
    with torch.no_grad():
        model(ids, caches=caches)
    nxt = torch.randint(0, 256, (1, 1), generator=gen)
    saved = [(c.length, dict(c.replay), dict(c.extra)) for c in caches]
    # a rolling (windowed) cache shifts what it holds on every append: keep a copy to restore
    windows = [(c, c.held, [t.clone() for t in (c.k, c.v, c.pos, c.key_valid)])
               for c in caches if hasattr(c, "held")]

    def step():
        with torch.no_grad():
            out = model(nxt, caches=caches)
        for cache, (length, replay, extra) in zip(caches, saved):
            cache.length, cache.replay, cache.extra = length, dict(replay), dict(extra)
        for cache, held, tensors in windows:
            cache.held = held
            for live, kept in zip((cache.k, cache.v, cache.pos, cache.key_valid), tensors):
                token_dim = 2 if live.dim() == 4 else 1           # (B, H, L, D) or (B, L)
                live.narrow(token_dim, 0, held).copy_(kept.narrow(token_dim, 0, held))
        return out

    return step


def prefill(model: TransformerLM, context: int):
    """A closure timing the forward of ``context`` tokens into empty caches (a recompute)."""
    ids = torch.randint(0, 256, (1, context), generator=torch.Generator().manual_seed(1))

    def run():
        caches = model.make_caches(1, context)
        with torch.no_grad():
            return model(ids, caches=caches)

    return run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--contexts", type=int, nargs="+", default=[256, 1024, 2048, 4096])
    parser.add_argument("--encodings", nargs="+", default=list(DEFAULT_ENCODINGS))
    parser.add_argument("--scalings", nargs="*", default=list(SCALINGS),
                        help=f"length-dependent RoPE candidates: {', '.join(SCALINGS)}")
    parser.add_argument("--variants", nargs="*", default=list(VARIANTS),
                        help=f"option and plan candidates: {', '.join(VARIANTS)}")
    parser.add_argument("--original-length", type=int, default=256,
                        help="original_max_position_embeddings of the RoPE scalings")
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    unknown = sorted(set(args.encodings) - set(list_encodings()))
    unknown += sorted(set(args.scalings) - set(SCALINGS))
    unknown += sorted(set(args.variants) - set(VARIANTS))
    if unknown:
        parser.error(f"unknown candidate(s) {', '.join(unknown)}")
    names = [BASELINE] + [n for n in args.encodings if n != BASELINE]
    models = {name: build(name, args) for name in names}
    models.update({label: build("rope", args, SCALINGS[label]) for label in args.scalings})
    models.update({label: build(VARIANTS[label][0], args, options=VARIANTS[label][1],
                                plan=VARIANTS[label][2]) for label in args.variants})

    print(f"# cached decoding, one new token: d_model={args.d_model} layers={args.layers} "
          f"heads={args.heads} fp32 batch 1, {args.rounds} rounds, {args.clock} clock; "
          f"scalings with original length {args.original_length}")
    print(f"# {machine_line()}")
    rows = {}
    for context in args.contexts:
        candidates = {name: decode_step(model, context - (name == STEPPED))
                      for name, model in models.items()}
        if STEPPED in models:
            candidates[f"{STEPPED} recompute"] = prefill(models[STEPPED], context)
        result = compare(candidates, rounds=args.rounds, warmup=args.warmup, clock=args.clock)
        print(f"\n## context {context}\n")
        print(result.table(BASELINE))
        rows[context] = result
    print("\n## per-token time / rope's at the same context (median over rounds)\n")
    header = "| candidate | " + " | ".join(str(c) for c in args.contexts) + " |"
    print(header + "\n|---|" + "---:|" * len(args.contexts))
    for name in models:
        cells = []
        for context in args.contexts:
            ratio = rows[context].ratio(name, BASELINE)[0]
            if name == STEPPED:
                recompute = rows[context].ratio(f"{STEPPED} recompute", BASELINE)[0]
                amortized = ratio + recompute / (context / 2)
                cells.append(f"{amortized:.2f} ({ratio:.2f} + {recompute:.0f} / {context // 2})")
            else:
                cells.append(f"{ratio:.2f}")
        print(f"| {name} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
