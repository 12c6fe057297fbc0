"""Measuring Hugging Face models: perplexity against length on the shared windows, and
memory estimates."""

from __future__ import annotations

import mmap

import pytest
import torch

from tests.hf.helpers import VOCAB
from tests.hf.helpers import peaked_model as _model
from tests.hf.helpers import tiny_config as _config

transformers = pytest.importorskip("transformers")

from posenc.eval.perplexity import perplexity  # noqa: E402
from posenc.hf.measure import (  # noqa: E402
    PeakMemory,
    bootstrap_ppl_std,
    check_memory,
    forward_bytes,
    logits_fn,
    perplexity_vs_length,
)


def test_perplexity_vs_length_uses_the_shared_windows(ids):
    model = _model(_config())
    stream = torch.randint(0, VOCAB, (200,), generator=torch.Generator().manual_seed(3))
    points = perplexity_vs_length(model, stream, [32, 64], stride=16, eval_windows=3)
    direct = perplexity(logits_fn(model), stream, 64, stride=16, eval_windows=3)
    assert points[1].nll == pytest.approx(direct.nll, rel=1e-6)
    assert [p.n_windows for p in points] == [3, 3] and points[0].ppl != points[1].ppl


def test_memory_estimate_refuses_long_lengths():
    config = _config()
    assert forward_bytes(config, 2048) > 3.5 * forward_bytes(config, 1024) / 2
    assert check_memory(config, 64, limit=10**9) > 0
    with pytest.raises(ValueError, match=r"length 100000 needs about .* GiB"):
        check_memory(config, 100_000, limit=10**6)
    config._attn_implementation = "eager"          # materialized scores count too
    assert forward_bytes(config, 4096) > 2 * 4 * 4096 * 4096 * 4
    # a fresh anonymous mapping, written page by page: new resident memory whatever the
    # allocator keeps from earlier tests (a training run in this process sets glibc to keep
    # freed memory, which a tensor of the same size would reuse without a new peak)
    with PeakMemory() as mem:
        block = mmap.mmap(-1, 256 * 2**20)           # 256 MiB
        for offset in range(0, len(block), mmap.PAGESIZE):
            block[offset] = 1
        block.close()
    assert mem.delta > 200 * 2**20


def test_each_window_is_kept_and_gives_the_spread():
    model = _model(_config())
    stream = torch.randint(0, VOCAB, (200,), generator=torch.Generator().manual_seed(3))
    point, single = perplexity_vs_length(model, stream, [64, 199], stride=32, eval_windows=4)
    assert point.window_tokens == (63, 32, 32, 32) and len(point.window_nll) == 4
    weighted = sum(n * t for n, t in zip(point.window_nll, point.window_tokens))
    assert weighted / sum(point.window_tokens) == pytest.approx(point.nll, rel=1e-6)
    assert len(set(point.window_nll)) == 4 and point.ppl_std > 0
    assert point.ppl_std == bootstrap_ppl_std(point.window_nll, point.window_tokens, 0)
    assert single.n_windows == 1 and single.ppl_std is None


def test_bootstrap_spread():
    assert bootstrap_ppl_std([2.0], [10]) is None
    assert bootstrap_ppl_std([2.0, 2.0, 2.0], [5, 9, 9]) == pytest.approx(0.0, abs=1e-9)
    wide = bootstrap_ppl_std([1.0, 3.0, 2.0, 2.5], [8, 8, 8, 8], seed=1)
    narrow = bootstrap_ppl_std([1.9, 2.1, 2.0, 2.05], [8, 8, 8, 8], seed=1)
    assert wide == bootstrap_ppl_std([1.0, 3.0, 2.0, 2.5], [8, 8, 8, 8], seed=1)
    assert wide > 5 * narrow > 0
    with pytest.raises(ValueError, match="differ in length"):
        bootstrap_ppl_std([1.0, 2.0], [8])
