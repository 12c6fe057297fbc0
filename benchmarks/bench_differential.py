"""Differential training: posenc's TransformerLM against x-transformers, same loop, same data.

Both models train under one loop on the same batches of the byte-level standard-library
corpus (posenc's data pipeline: the windows of step s depend only on (seed, s)): AdamW with
betas (0.9, 0.95), linear warmup over a tenth of the steps then cosine decay to a tenth of the
peak lr, gradient clipping at 1.0. posenc's parameters are grouped by
:func:`posenc.train.optim.param_groups` (what ``posenc train`` uses); the peer's by the usual
rule (weight decay on matrices only). Each model is then scored on the test split with
non-overlapping windows of L and 8L tokens (the same scored tokens for both models).

Shared encodings and the peer's switches (x-transformers ``Decoder`` / ``TransformerWrapper``):
nope (no position input), sinusoidal (``scaled_sinu_pos_emb``: the Vaswani table times a
learned scalar), rope and xpos (``rotary_pos_emb`` / ``rotary_xpos`` over the whole head,
as posenc), alibi (``alibi_pos_bias``), t5 (``rel_pos_bias``). posenc's encodings take the
options ``posenc compare`` gives them.

    .venv/bin/python -m benchmarks.bench_differential                      # d128 x 2 layers
    .venv/bin/python -m benchmarks.bench_differential --d-model 256 --layers 4 --heads 8

x-transformers is an optional dependency (``pip install -e '.[peer]'``).
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import subprocess
import time
from dataclasses import asdict, dataclass

import torch
from torch import nn

from posenc.data.batches import prepare_data
from posenc.data.cache import default_cache_dir, token_stream
from posenc.data.corpora import load_corpus
from posenc.eval.perplexity import perplexity
from posenc.lab.compare.presets import DEFAULT_PE_OPTIONS
from posenc.models.blocks import embedding_init_std
from posenc.models.lm import LMConfig, TransformerLM
from posenc.train.loop import lm_loss, lr_factor
from posenc.train.optim import param_groups

SHARED_ENCODINGS = ("nope", "sinusoidal", "rope", "alibi", "t5", "xpos")


def require_peer():
    """The x_transformers module, or SystemExit with how to install it."""
    try:
        import x_transformers
    except ImportError:
        raise SystemExit("bench_differential: error: x-transformers is not installed; install "
                         "it with `.venv/bin/pip install x-transformers` (or the 'peer' extra: "
                         "pip install -e '.[peer]')") from None
    return x_transformers


@dataclass(frozen=True)
class Setup:
    """Model shape and training budget shared by both implementations."""

    d_model: int = 128
    n_layers: int = 2
    n_heads: int = 4
    train_len: int = 64
    batch_size: int = 32
    steps: int = 600
    lr: float = 2e-3
    weight_decay: float = 0.1
    betas: tuple[float, float] = (0.9, 0.95)
    min_lr_ratio: float = 0.1
    grad_clip: float = 1.0
    eval_tokens: int = 32768
    t5_max_distance: int = 128                  # T5's default

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads


def peer_switches(encoding: str, head_dim: int) -> tuple[dict, dict]:
    """(TransformerWrapper kwargs, Decoder kwargs) selecting ``encoding`` in x-transformers."""
    no_abs = {"use_abs_pos_emb": False}
    return {
        "nope": (no_abs, {}),
        "sinusoidal": ({"use_abs_pos_emb": True, "scaled_sinu_pos_emb": True}, {}),
        "rope": (no_abs, {"rotary_pos_emb": True, "rotary_emb_dim": head_dim}),
        "xpos": (no_abs, {"rotary_xpos": True, "rotary_emb_dim": head_dim}),
        "alibi": (no_abs, {"alibi_pos_bias": True}),
        "t5": (no_abs, {"rel_pos_bias": True}),
    }[encoding]


def peer_options(encoding: str, s: Setup) -> tuple[dict, dict]:
    wrapper_kw, decoder_kw = peer_switches(encoding, s.head_dim)
    if encoding == "t5":
        decoder_kw = {**decoder_kw, "rel_pos_max_distance": s.t5_max_distance}
    return wrapper_kw, decoder_kw


def build_peer(encoding: str, s: Setup, max_len: int) -> nn.Module:
    """An x-transformers decoder LM of the shape ``s``: ids (B, T) -> logits (B, T, V)."""
    xt = require_peer()
    wrapper_kw, decoder_kw = peer_options(encoding, s)
    return xt.TransformerWrapper(
        num_tokens=256, max_seq_len=max_len, **wrapper_kw,
        attn_layers=xt.Decoder(dim=s.d_model, depth=s.n_layers, heads=s.n_heads,
                               attn_dim_head=s.head_dim, verbose=False, **decoder_kw))


def build_posenc(encoding: str, s: Setup) -> nn.Module:
    cfg = LMConfig(vocab_size=256, d_model=s.d_model, n_layers=s.n_layers, n_heads=s.n_heads,
                   max_len=s.train_len, pe=encoding,
                   pe_options=posenc_options(encoding, s))
    return TransformerLM(cfg)


def posenc_options(encoding: str, s: Setup) -> dict:
    """Options of ``encoding``: T5's ``max_distance`` as set; the sinusoidal table scaled to
    the token embeddings' std (Vaswani et al. add the table to embeddings of comparable size:
    theirs are multiplied by sqrt(d_model), which is the same ratio)."""
    options = dict(DEFAULT_PE_OPTIONS.get(encoding, {}))
    if encoding == "t5":
        options["max_distance"] = s.t5_max_distance
    if encoding == "sinusoidal":
        options["scale"] = embedding_init_std(s.d_model)
    return options


def peer_param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Weight decay on matrices (dim >= 2) only."""
    params = [p for p in model.parameters() if p.requires_grad]
    return [{"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
            {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]


def train(model: nn.Module, groups: list[dict], data, s: Setup, seed: int) -> float:
    """The shared loop; returns the mean training loss of the last 50 steps."""
    opt = torch.optim.AdamW([g for g in groups if g["params"]], lr=s.lr, betas=s.betas)
    warmup = s.steps // 10
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda i: lr_factor(i, warmup, s.steps, s.min_lr_ratio))
    model.train()
    losses = []
    for step in range(s.steps):
        b = data.batch(s.batch_size, s.train_len, seed, step)
        loss = lm_loss(model(b.inputs), b.targets)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), s.grad_clip)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
        if not math.isfinite(losses[-1]):
            break
    return statistics.fmean(losses[-50:])


@torch.no_grad()
def evaluate(model: nn.Module, tokens: torch.Tensor, lengths: list[int],
             eval_tokens: int) -> dict[int, float]:
    """Perplexity at each length over non-overlapping windows of the test stream."""
    model.eval()
    out = {}
    for n in lengths:
        r = perplexity(lambda ids: model(ids), tokens, n, eval_windows=max(1, eval_tokens // n),
                       batch_size=max(1, 8192 // n))
        out[n] = r.ppl
    return out


def run_one(impl: str, encoding: str, s: Setup, data, tokens, seed: int) -> dict:
    torch.manual_seed(seed)
    if impl == "posenc":
        model = build_posenc(encoding, s)
        groups = param_groups(model, s.weight_decay, s.lr)
    else:
        model = build_peer(encoding, s, 8 * s.train_len)
        groups = peer_param_groups(model, s.weight_decay)
    t0 = time.perf_counter()
    train_loss = train(model, groups, data, s, seed)
    seconds = time.perf_counter() - t0
    ppl = evaluate(model, tokens, [s.train_len, 8 * s.train_len], s.eval_tokens)
    return {"impl": impl, "encoding": encoding, "seed": seed, "train_loss": train_loss,
            "ppl_L": ppl[s.train_len], "ppl_8L": ppl[8 * s.train_len], "seconds": seconds}


def table(rows: list[dict], s: Setup) -> str:
    """Markdown: per encoding, mean over seeds of ppl(L) and ppl(8L) for both, and ratios."""
    L = s.train_len
    lines = [f"| encoding | x-transformers ppl({L}) | posenc ppl({L}) | posenc / peer | "
             f"x-transformers ppl({8 * L}) | posenc ppl({8 * L}) | posenc ppl({8 * L})/"
             f"ppl({L}) |", "|---|---:|---:|---:|---:|---:|---:|"]

    def cell(values: list[float]) -> str:
        m = statistics.fmean(values)
        if len(values) < 2:
            return f"{m:.3f}"
        return f"{m:.3f} ± {(max(values) - min(values)) / 2:.3f}"

    for enc in [e for e in SHARED_ENCODINGS if any(r["encoding"] == e for r in rows)]:
        peer = [r for r in rows if r["encoding"] == enc and r["impl"] == "x-transformers"]
        ours = [r for r in rows if r["encoding"] == enc and r["impl"] == "posenc"]
        if not peer or not ours:
            continue
        p_l, o_l = [r["ppl_L"] for r in peer], [r["ppl_L"] for r in ours]
        p_8, o_8 = [r["ppl_8L"] for r in peer], [r["ppl_8L"] for r in ours]
        lines.append(f"| {enc} | {cell(p_l)} | {cell(o_l)} | "
                     f"{statistics.fmean(o_l) / statistics.fmean(p_l):.3f} | {cell(p_8)} | "
                     f"{cell(o_8)} | {statistics.fmean(o_8) / statistics.fmean(o_l):.2f} |")
    return "\n".join(lines)


def commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--encodings", nargs="+", default=list(SHARED_ENCODINGS),
                   choices=SHARED_ENCODINGS)
    p.add_argument("--impls", nargs="+", default=["x-transformers", "posenc"],
                   choices=["x-transformers", "posenc"])
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--train-len", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--steps", type=int, default=600)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--eval-tokens", type=int, default=32768)
    p.add_argument("--t5-max-distance", type=int, default=128,
                   help="T5's max_distance in both implementations (128, T5's default)")
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads (1)")
    p.add_argument("--results", help="JSON-lines file: each run is appended to it and the "
                   "table covers every run in it at this shape (so runs made by separate "
                   "invocations, e.g. the peer once and posenc after a change, combine)")
    p.add_argument("--table-only", action="store_true",
                   help="print the table of --results without training")
    args = p.parse_args(argv)
    if "x-transformers" in args.impls:
        require_peer()
    torch.set_num_threads(args.threads)
    s = Setup(d_model=args.d_model, n_layers=args.layers, n_heads=args.heads,
              train_len=args.train_len, batch_size=args.batch_size, steps=args.steps,
              lr=args.lr, eval_tokens=args.eval_tokens, t5_max_distance=args.t5_max_distance)
    setup_key = json.dumps(asdict(s), sort_keys=True)
    if args.table_only:
        if not args.results:
            p.error("--table-only needs --results")
        print(table(load_rows(args.results, setup_key), s))
        return
    data = prepare_data(None, "byte", None, s.train_len)
    tokens = torch.from_numpy(token_stream(load_corpus(None), data.tokenizer, "test",
                                           default_cache_dir())[:s.eval_tokens + 1].astype("int64"))
    print(f"# commit {commit()}, torch {torch.__version__}, python {platform.python_version()}, "
          f"{args.threads} thread(s); shape d{s.d_model} x {s.n_layers} layers x {s.n_heads} "
          f"heads, {s.steps} steps x {s.batch_size} x {s.train_len} tokens, lr {s.lr}")
    rows = []
    for enc in args.encodings:
        for seed in args.seeds:
            for impl in args.impls:
                r = run_one(impl, enc, s, data, tokens, seed)
                r.update(commit=commit(), threads=args.threads, setup=setup_key)
                rows.append(r)
                if args.results:
                    with open(args.results, "a") as f:
                        f.write(json.dumps(r) + "\n")
                print(f"{impl:>14} {enc:<10} seed {seed}: train {r['train_loss']:.4f}  "
                      f"ppl({s.train_len}) {r['ppl_L']:.3f}  ppl({8 * s.train_len}) "
                      f"{r['ppl_8L']:.3f}  ({r['seconds']:.0f} s)", flush=True)
    print()
    print(table(load_rows(args.results, setup_key) if args.results else rows, s))


def load_rows(path: str, setup_key: str) -> list[dict]:
    """The runs recorded in ``path`` at this setup; a later run of the same (impl, encoding,
    seed) replaces an earlier one."""
    rows: dict[tuple, dict] = {}
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            if r.get("setup") == setup_key:
                rows[(r["impl"], r["encoding"], r["seed"])] = r
    return list(rows.values())


if __name__ == "__main__":
    main()
