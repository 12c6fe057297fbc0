"""A tiny Hugging Face Llama patched by each region method: logits of the merged fused passes
(posenc.attention.region_flash) equal those of the explicit scores (``MERGED = False``) past
the original context, for a prefill and for cached decoding.

Tolerance: 1e-5 of the largest logit (about 8 here) in float32: both paths sum the same
terms in another order, and two layers of the peaked model carry the rounding (about 2e-5
absolute at most); the attention outputs themselves agree within 1e-5 absolute
(tests/attention/test_region_flash.py)."""

from __future__ import annotations

import pytest
import torch

from tests.hf.helpers import ORIG, VOCAB, logits_of, peaked_model, tiny_config

transformers = pytest.importorskip("transformers")

from posenc.attention import region_flash  # noqa: E402
from posenc.hf import extend  # noqa: E402

REGION = ["self_extend", "rerope", "leaky_rerope", "dual_chunk", "streaming"]
LENGTH = 7 * ORIG + 3                        # 227 tokens, past the original context of 32


@pytest.fixture(scope="module")
def long_ids():
    return torch.randint(0, VOCAB, (1, LENGTH), generator=torch.Generator().manual_seed(5))


def _assert_paths_agree(monkeypatch, run):
    merged = run()
    monkeypatch.setattr(region_flash, "MERGED", False)
    explicit = run()
    monkeypatch.setattr(region_flash, "MERGED", True)
    scale = float(explicit.abs().max())
    torch.testing.assert_close(merged, explicit, atol=1e-5 * scale, rtol=0)
    return merged


@pytest.mark.parametrize("method", REGION)
@pytest.mark.parametrize("block", [None, 48], ids=["one-block", "blocks-of-48"])
def test_prefill_logits_equal_the_explicit_scores(method, block, long_ids, monkeypatch):
    """Defaults for factor LENGTH / ORIG, in one block of queries and in blocks of 48."""
    if block is not None:
        monkeypatch.setattr(region_flash, "QUERY_BLOCK", block)
    model = peaked_model(tiny_config("llama"))
    plain = logits_of(model, long_ids)
    extend(model, method, LENGTH / ORIG)
    merged = _assert_paths_agree(monkeypatch, lambda: logits_of(model, long_ids))
    assert (merged - plain).abs().max() > 1e-2                # the method changes the model


@pytest.mark.parametrize("method", REGION)
def test_cached_decoding_logits_equal_the_explicit_scores(method, long_ids, monkeypatch):
    """A prefill of 150 tokens, then 5 more at once, then one at a time."""
    model = peaked_model(tiny_config("llama"))
    extend(model, method, LENGTH / ORIG)

    def decode():
        cache = transformers.DynamicCache(config=model.config)
        out = []
        with torch.no_grad():
            for a, b in [(0, 150), (150, 155)] + [(t, t + 1) for t in range(155, 162)]:
                out.append(model(input_ids=long_ids[:, a:b], cache=cache,
                                 use_cache=True).logits)
        return torch.cat(out, 1)
    _assert_paths_agree(monkeypatch, decode)
