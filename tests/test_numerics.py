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

from posenc import build_encoding, list_encodings
from posenc.encodings.rotary_kernels import apply_rotary

HEAD_DIM = 128
N_VECTORS = 2048


def _exact_rotation(x: torch.Tensor, pos: int, inv_freq: torch.Tensor) -> torch.Tensor:
    """x (..., D) rotated at position ``pos`` in float64, "half" layout."""
    angles = float(pos) * inv_freq.double()                              # (D/2,)
    a, b = x.double().chunk(2, dim=-1)
    return torch.cat((a * angles.cos() - b * angles.sin(),
                      b * angles.cos() + a * angles.sin()), dim=-1)


def _error_ratio(got: torch.Tensor, exact: torch.Tensor) -> float:
    """RMS error of ``got`` over the RMS error of rounding ``exact`` to got's dtype."""
    floor = exact.to(got.dtype).double() - exact
    return ((got.double() - exact).pow(2).mean().sqrt() / floor.pow(2).mean().sqrt()).item()


@pytest.mark.parametrize("options", [
    {"theta": 10000.0},
    {"theta": 500000.0},
    {"theta": 500000.0, "scaling": {"rope_type": "llama3", "factor": 8.0,
                                    "original_max_position_embeddings": 8192,
                                    "low_freq_factor": 1.0, "high_freq_factor": 4.0}},
], ids=["theta1e4", "theta5e5", "llama3"])
@pytest.mark.parametrize("position", [32_771, 70_001, 1_000_000, 16_777_213, 2**31 - 1])
def test_rope_bf16_error_at_long_positions_is_near_the_rounding_floor(options, position):
    pe = build_encoding("rope", n_heads=1, head_dim=HEAD_DIM, **options)
    q = torch.randn(1, N_VECTORS, 1, HEAD_DIM).to(torch.bfloat16)   # one position per vector
    pos = torch.tensor([position])
    got, _ = pe.transform_qk(q, q, pos, pos)
    exact = _exact_rotation(q, position, pe.inv_freq)
    assert _error_ratio(got, exact) <= 2.0
    # the check can fail: angles as a plain fp32 product are too coarse from 1e6 on
    plain = pos.float()[:, None] * pe.inv_freq[None, :]
    coarse = apply_rotary(q, plain.cos(), plain.sin())
    if position >= 1_000_000:
        assert _error_ratio(coarse, exact) > 2.0


def test_rope_fp32_angles_error_at_a_million_is_tiny():
    """fp32 outputs: the rotation error is fp32 rounding, not angle error (< 1e-5 relative)."""
    pe = build_encoding("rope", n_heads=1, head_dim=HEAD_DIM)
    q = torch.randn(1, 64, 1, HEAD_DIM)
    pos = torch.tensor([1_000_000])
    got, _ = pe.transform_qk(q, q, pos, pos)
    exact = _exact_rotation(q, 1_000_000, pe.inv_freq)
    assert (got.double() - exact).abs().max() < 1e-5 * exact.abs().max()


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
