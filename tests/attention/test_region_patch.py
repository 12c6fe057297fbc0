"""Region methods on posenc's own RoPE TransformerLM: cached decoding equals a full forward,
degenerate options give the unpatched model, remove restores it, and what is refused."""

from __future__ import annotations

import pytest
import torch

from posenc import LMConfig, TransformerLM
from posenc.attention.extension_methods import DualChunk, ReRoPE, SelfExtend, StreamingLLM
from posenc.attention.region_patch import apply_region_method, remove_region_method

T = 40


def _model(pe="rope", **pe_options):
    torch.manual_seed(0)
    model = TransformerLM(LMConfig(pe=pe, pe_options=pe_options, d_model=32, n_heads=4,
                                   n_layers=2, vocab_size=50, max_len=64)).eval()
    with torch.no_grad():                     # peaked attention: positions matter
        for p in model.parameters():
            if p.dim() == 2:
                p.mul_(4.0)
    return model


IDS = torch.randint(0, 50, (2, T), generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("method", [SelfExtend(5, 3), ReRoPE(6), ReRoPE(6, leak=3.0),
                                    DualChunk(12, 3), StreamingLLM(2, 9)], ids=str)
@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_cached_decoding_equals_full_forward(method, layout):
    model = _model(layout=layout)
    with torch.no_grad():
        plain = model(IDS)
        apply_region_method(model, method)
        full = model(IDS)
        caches = model.make_caches(2, T)
        steps = [model(IDS[:, :11], caches=caches)]
        steps += [model(IDS[:, t:t + 1], caches=caches) for t in range(11, T)]
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-4, rtol=1e-4)
    assert (full - plain).abs().max() > 1e-2
    remove_region_method(model)
    with torch.no_grad():
        torch.testing.assert_close(model(IDS), plain, atol=0, rtol=0)


@pytest.mark.parametrize("method", [SelfExtend(5, 1), ReRoPE(T), DualChunk(T + 4, 4),
                                    StreamingLLM(2, T)], ids=str)
def test_degenerate_options_give_the_unpatched_model(method):
    model = _model()
    with torch.no_grad():
        plain = model(IDS)
        apply_region_method(model, method)
        torch.testing.assert_close(model(IDS), plain, atol=2e-5, rtol=1e-5)


def test_refusals():
    with pytest.raises(ValueError, match="need a rope encoding"):
        _call(_model("alibi"), ReRoPE(4))
    with pytest.raises(ValueError, match="need a rope encoding"):
        _call(_model(scaling={"rope_type": "dynamic", "factor": 2.0}), ReRoPE(4))
    model = _model()
    apply_region_method(model, ReRoPE(4))
    with pytest.raises(ValueError, match="already applied"):
        apply_region_method(model, ReRoPE(4))
    with torch.no_grad(), pytest.raises(ValueError, match="unpadded rows"):
        model(IDS, attention_mask=torch.ones(2, T, dtype=torch.long).index_fill_(1,
                                                                          torch.tensor([0]), 0))


def _call(model, method):
    apply_region_method(model, method)
    with torch.no_grad():
        model(IDS)
