"""Why T5's bias degrades past the training length here: attention on keys farther than L.

Trains T5 in posenc and in x-transformers exactly as ``bench_differential`` does (same loop,
batches, shape; ``--t5-max-distance`` in both), then measures at 8L on the test split:

- ``ppl(L)``, ``ppl(8L)``: as in the differential table;
- ``ppl(8L), keys < L``: the same windows with every key L or more tokens back hidden from
  the query (-inf added to its logit): what the model does with only the distances it saw
  in training. If this is close to ppl(L), the degradation at 8L comes from the far keys;
- ``far attention``: the share of each query's attention that goes to keys L or more tokens
  back (mean over layers, heads and the last half of the queries of each 8L window);
- ``last-bucket bias``: the bias (in logits, per head) of T5's last bucket, which every key
  max_distance or more back shares.

    .venv/bin/python -m benchmarks.t5_far_keys --t5-max-distance 64

Needs x-transformers (``pip install -e '.[peer]'``). One thread; about 10 minutes on a
2-CPU machine.
"""

from __future__ import annotations

import argparse
import statistics

import torch
from torch import nn

from posenc.data.batches import prepare_data
from posenc.data.cache import default_cache_dir, token_stream
from posenc.data.corpora import load_corpus
from posenc.train.optim import param_groups

from .bench_differential import (
    Setup,
    build_peer,
    build_posenc,
    evaluate,
    peer_param_groups,
    require_peer,
    train,
)


def far_mask(n: int, train_len: int) -> torch.Tensor:
    """(n, n) bool: key j is train_len or more tokens before query i (or after it)."""
    i = torch.arange(n)
    return (i[:, None] - i[None, :] >= train_len) | (i[None, :] > i[:, None])


class HideFarKeys:
    """Adds -inf to the logits of keys ``train_len`` or more tokens back, by wrapping the
    module that produces each implementation's T5 bias, while active."""

    def __init__(self, impl: str, model: nn.Module, train_len: int) -> None:
        self.impl, self.model, self.train_len = impl, model, train_len
        self.saved = None

    def __enter__(self):
        if self.impl == "posenc":
            pe = self.model.pe
            self.saved = (pe, pe.score_bias)

            def score_bias(q, k, at):
                bias = self.saved[1](q, k, at)
                rel = at.q_pos[..., :, None] - at.k_pos[..., None, :]
                return bias.masked_fill(rel >= self.train_len, float("-inf"))
            pe.score_bias = score_bias
        else:
            xt = require_peer()
            cls = xt.x_transformers.RelativePositionBias
            self.saved = (cls, cls.forward)
            original, train_len = cls.forward, self.train_len

            def forward(module, i, j):
                bias = original(module, i, j)
                q = torch.arange(j - i, j, device=bias.device)
                k = torch.arange(j, device=bias.device)
                return bias.masked_fill(q[:, None] - k[None, :] >= train_len, float("-inf"))
            cls.forward = forward
        return self

    def __exit__(self, *exc):
        owner, fn = self.saved
        if self.impl == "posenc":
            del owner.score_bias                          # the class's method again
        else:
            owner.forward = fn


@torch.no_grad()
def far_attention(impl: str, model: nn.Module, tokens: torch.Tensor, n: int, train_len: int,
                  windows: int = 4) -> float:
    """Mean share of attention on keys >= train_len back, over layers, heads and the last
    half of the queries of ``windows`` windows of n tokens."""
    model.eval()
    far = far_mask(n, train_len)[n // 2:]
    shares = []
    for w in range(windows):
        ids = tokens[w * n:(w + 1) * n][None]
        if impl == "posenc":
            _, maps = model(ids, need_weights=True, backend="eager")
        else:
            _, maps = model(ids, return_attn=True)
        for m in maps:                                        # (1, H, n, n) per layer
            shares.append((m[0, :, n // 2:] * far).sum(-1).mean().item())
    return statistics.fmean(shares)


def last_bucket(impl: str, model: nn.Module) -> list[float]:
    """T5's bias of the last bucket per head, in logits."""
    if impl == "posenc":
        return model.pe.bias.weight[-1].tolist()
    module = next(m for m in model.modules()
                  if type(m).__name__ == "RelativePositionBias")
    return (module.relative_attention_bias.weight[-1] * module.scale).tolist()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--t5-max-distance", type=int, default=64)
    p.add_argument("--steps", type=int, default=600)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    require_peer()
    torch.set_num_threads(1)
    s = Setup(steps=args.steps, t5_max_distance=args.t5_max_distance)
    data = prepare_data(None, "byte", None, s.train_len)
    tokens = torch.from_numpy(token_stream(load_corpus(None), data.tokenizer, "test",
                                           default_cache_dir())[:s.eval_tokens + 1]
                              .astype("int64"))
    long = 8 * s.train_len
    print(f"# T5 (max_distance {s.t5_max_distance}), d{s.d_model} x {s.n_layers} layers x "
          f"{s.n_heads} heads, {s.steps} steps x {s.batch_size} x {s.train_len} tokens, "
          f"seed {args.seed}")
    print(f"| implementation | ppl({s.train_len}) | ppl({long}) | ppl({long}), keys < "
          f"{s.train_len} | far attention at {long} | last-bucket bias per head |")
    print("|---|---:|---:|---:|---:|---|")
    for impl in ("x-transformers", "posenc"):
        torch.manual_seed(args.seed)
        if impl == "posenc":
            model = build_posenc("t5", s)
            groups = param_groups(model, s.weight_decay, s.lr)
        else:
            model = build_peer("t5", s, long)
            groups = peer_param_groups(model, s.weight_decay)
        train(model, groups, data, s, args.seed)
        ppl = evaluate(model, tokens, [s.train_len, long], s.eval_tokens)
        with HideFarKeys(impl, model, s.train_len):
            hidden = evaluate(model, tokens, [long], s.eval_tokens)[long]
        share = far_attention(impl, model, tokens, long, s.train_len)
        bias = ", ".join(f"{b:.2f}" for b in last_bucket(impl, model))
        print(f"| {impl} | {ppl[s.train_len]:.3f} | {ppl[long]:.3f} | {hidden:.3f} | "
              f"{share:.3f} | {bias} |", flush=True)


if __name__ == "__main__":
    main()
