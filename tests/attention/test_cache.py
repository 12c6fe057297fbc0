"""The KV cache: a positive capacity, and a sequence past it refused with nothing
half-written."""

from __future__ import annotations

import pytest
import torch

from posenc import LMConfig, TransformerLM
from posenc.attention import KVCache

pytestmark = pytest.mark.usefixtures("single_thread")


@pytest.mark.parametrize("options", [{}, {"scaling": {"rope_type": "dynamic", "factor": 2.0}}])
@torch.no_grad()
def test_sequence_past_the_cache_size(options):
    model = TransformerLM(LMConfig(vocab_size=16, d_model=16, n_heads=2, n_layers=2,
                                   max_len=4, pe="rope", pe_options=options)).eval()
    ids = torch.randint(0, 16, (1, 8))
    caches = model.make_caches(1, 8)
    model(ids[:, :6], caches=caches)
    with pytest.raises(ValueError, match=r"sequence length 9 exceeds the KV cache size 8; "
                                         r"valid lengths are 1..8"):
        model(ids[:, :3], caches=caches)
    assert all(c.length == 6 for c in caches)                 # nothing was half-written
    torch.testing.assert_close(model(ids[:, 6:], caches=caches), model(ids)[:, 6:])


def test_cache_capacity_must_be_positive():
    with pytest.raises(ValueError, match="capacity"):
        KVCache(1, 2, 4, 0)
