"""Numerics at long range: RoPE angles past 2^16 positions, ALiBi in fp16 at 131072 positions.

RoPE measurement: q (bf16) rotated at one position, against a float64 reference that rotates
the same bf16 values by the float64 angle ``pos * inv_freq`` (the encoding's own fp32
frequencies, as in Hugging Face). The "bf16 rounding floor" is the error of rounding that
exact float64 result to bf16, the least any bf16 output can have; the ratio is the RMS error
over the RMS floor.
"""

from __future__ import annotations

import pytest
import torch

from posenc import list_encodings


@pytest.mark.parametrize("pe", list_encodings())
def test_every_encoding_runs_with_bfloat16_weights(pe):
    """A model cast to bfloat16 (weights and activations) runs forward and stays close to
    its float32 self: no dtype mismatch inside an encoding's own computation."""
    from tests.helpers import context_options
    from posenc import LMConfig, TransformerLM
    torch.manual_seed(0)
    model = TransformerLM(LMConfig(vocab_size=32, d_model=32, n_layers=1, n_heads=2,
                                   max_len=16, pe=pe,
                                   pe_options=context_options(pe, vocab_size=32))).eval()
    ids = torch.randint(0, 32, (2, 16))
    with torch.no_grad():
        want = model(ids)
        got = model.to(torch.bfloat16)(ids)
    assert got.dtype == torch.bfloat16
    assert (got.float() - want).abs().max() < 0.1 * want.abs().max() + 0.05
