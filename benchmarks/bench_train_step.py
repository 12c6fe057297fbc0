"""One training step per encoding: eager against torch.compile, AdamW's for-loop against its
fused form, and x-transformers' step where it has the encoding.

A step is what ``posenc train`` does per batch: forward, cross-entropy, backward, gradient
clipping at 1.0 and an AdamW step (lr 2e-3, weight decay 0.1), on one fixed batch of random
byte ids. Candidates, each with its own model and optimizer from the same seed:

- ``eager``: posenc's ``TransformerLM`` as the training loop ran it before (AdamW's default
  implementation);
- ``eager+fused``: the same with ``AdamW(fused=True)``;
- ``compiled+fused``: ``torch.compile(model)`` (forward and backward through inductor) with
  the fused AdamW; its compile time (the first steps, until the time per step settles) is
  measured apart and turned into the number of steps after which compiling pays off;
- ``x-transformers``: the peer's decoder of the same shape with the default AdamW (only for
  nope, sinusoidal, rope, xpos, alibi, t5; needs ``pip install -e '.[peer]'``).

Times are interleaved rounds (:func:`benchmarks.common.compare`); the table gives each
candidate's median time and its ratio to ``eager`` in the same round with the IQR.

    .venv/bin/python -m benchmarks.bench_train_step --encodings rope alibi --rounds 20
    .venv/bin/python -m benchmarks.bench_train_step --d-model 64 --layers 2 --heads 2 \\
        --train-len 64 --batch-size 32
"""

from __future__ import annotations

import argparse
import math
import time

import torch
from torch import nn

from benchmarks.common import compare, machine_line
from posenc import LMConfig, TransformerLM
from posenc.encodings import list_encodings
from posenc.train.optim import param_groups

PEER_ENCODINGS = ("nope", "sinusoidal", "rope", "xpos", "alibi", "t5")
#: steps run to compile; the compile time is their total minus this many settled steps
COMPILE_STEPS = 3


def make_step(model: nn.Module, fused: bool, groups: list[dict] | None = None,
              compiled: bool = False):
    """A function running one training step of ``model`` on a fixed batch (set by caller)."""
    optimizer = torch.optim.AdamW(groups or model.parameters(), lr=2e-3, weight_decay=0.1,
                                  fused=fused or None)
    net = torch.compile(model) if compiled else model

    def step(ids: torch.Tensor) -> float:
        logits = net(ids[:, :-1])
        loss = nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(),
                                           ids[:, 1:].reshape(-1))
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach()
    return step


def posenc_model(encoding: str, a: argparse.Namespace) -> nn.Module:
    torch.manual_seed(0)
    return TransformerLM(LMConfig(vocab_size=256, d_model=a.d_model, n_layers=a.layers,
                                  n_heads=a.heads, max_len=a.train_len, pe=encoding)).train()


def peer_model(encoding: str, a: argparse.Namespace) -> nn.Module:
    from benchmarks.bench_differential import Setup, build_peer
    torch.manual_seed(0)
    setup = Setup(d_model=a.d_model, n_layers=a.layers, n_heads=a.heads,
                  train_len=a.train_len, batch_size=a.batch_size)
    return build_peer(encoding, setup, a.train_len).train()


def compile_seconds(step, ids: torch.Tensor) -> float:
    """Seconds the first COMPILE_STEPS steps took beyond COMPILE_STEPS settled steps."""
    start = time.perf_counter()
    for _ in range(COMPILE_STEPS):
        step(ids)
    first = time.perf_counter() - start
    start = time.perf_counter()
    for _ in range(COMPILE_STEPS):
        step(ids)
    return first - (time.perf_counter() - start)


def bench(encoding: str, a: argparse.Namespace) -> str:
    ids = torch.randint(0, 256, (a.batch_size, a.train_len + 1),
                        generator=torch.Generator().manual_seed(0))
    candidates = {}
    model = posenc_model(encoding, a)
    candidates["eager"] = make_step(model, False, param_groups(model, 0.1, 2e-3))
    model = posenc_model(encoding, a)
    candidates["eager+fused"] = make_step(model, True, param_groups(model, 0.1, 2e-3))
    compile_s = math.nan
    if not a.no_compile:
        torch._dynamo.reset()        # dynamo's recompile limit per code object would otherwise
        model = posenc_model(encoding, a)    # silently run later encodings eagerly
        candidates["compiled+fused"] = make_step(model, True, param_groups(model, 0.1, 2e-3),
                                                 compiled=True)
        compile_s = compile_seconds(candidates["compiled+fused"], ids)
    if not a.no_peer and encoding in PEER_ENCODINGS:
        candidates["x-transformers"] = make_step(peer_model(encoding, a), False)
    result = compare({k: (lambda f=f: f(ids)) for k, f in candidates.items()},
                     rounds=a.rounds, warmup=2, clock=a.clock)
    lines = [f"### {encoding}", "", result.table("eager")]
    if "compiled+fused" in candidates:
        saved = (result.median_ms("eager") - result.median_ms("compiled+fused")) / 1e3
        pays = f"after about {math.ceil(compile_s / saved)} steps" if saved > 0 else "never"
        lines += ["", f"compile time {compile_s:.1f} s (the first {COMPILE_STEPS} steps "
                  f"beyond settled ones); compiling pays off {pays}"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--encodings", nargs="+", default=["rope"],
                   help="encodings to time, or 'all'")
    p.add_argument("--d-model", type=int, default=256)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--train-len", type=int, default=256)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    p.add_argument("--clock", choices=("wall", "cpu"), default="wall")
    p.add_argument("--no-compile", action="store_true")
    p.add_argument("--no-peer", action="store_true")
    a = p.parse_args(argv)
    if a.threads:
        torch.set_num_threads(a.threads)
    encodings = list_encodings() if a.encodings == ["all"] else a.encodings
    print(f"{machine_line()}; d_model {a.d_model}, {a.layers} layers, {a.heads} heads, "
          f"L {a.train_len}, batch {a.batch_size}, {a.rounds} rounds, {a.clock} clock\n")
    for encoding in encodings:
        print(bench(encoding, a), "\n", flush=True)


if __name__ == "__main__":
    main()
