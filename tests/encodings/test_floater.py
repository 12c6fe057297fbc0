"""``floater``: the ODE it solves, integrated in fp32 under low-precision weights; its
options."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from posenc import build_encoding

H, D = 2, 4
C = H * D


def _pe(name, **options):
    return build_encoding(name, n_heads=H, head_dim=D, max_len=32, **options)


def test_floater_solves_its_ode():
    """rk4 at one step per position agrees with a tight adaptive solution, and the
    trajectory's central difference matches the dynamics."""
    pe = _pe("floater", delta=0.2)
    with torch.no_grad():
        coarse = pe.trajectory(30)
        fine = _pe("floater", delta=0.2, method="dopri5", rtol=1e-7, atol=1e-9)
        fine.load_state_dict(pe.state_dict())
        assert_close(coarse, fine.trajectory(30), atol=1e-5, rtol=1e-4)
        k = torch.arange(1, 29)
        slope = (coarse[k + 1] - coarse[k - 1]) / 2               # d p / d tau
        h = torch.stack([pe.dynamics(kk.float(), coarse[kk]) for kk in k])
        assert_close(slope, h, atol=2e-4, rtol=2e-2)


def test_floater_integrates_in_fp32_for_low_precision_models():
    """Integer times past 256 are not representable in bf16; the ODE runs in fp32."""
    pe = _pe("floater")
    want = pe.trajectory(260)
    pe.to(torch.bfloat16)
    got = pe.trajectory(260)
    assert got.dtype == torch.float32
    assert torch.equal(got[:100], pe.trajectory(100))
    assert_close(got, want, atol=1e-2, rtol=5e-2)          # parameters rounded to bf16
    x = torch.zeros(1, 3, C, dtype=torch.bfloat16)
    assert pe.embed(x, torch.tensor([257, 258, 259])).dtype == torch.bfloat16


@pytest.mark.parametrize("options,match", [
    ({"method": "leapfrog"}, "method"), ({"delta": 0.0}, "delta"),
    ({"substeps": 3}, "power of two"), ({"method": "dopri5", "substeps": 2}, "substeps"),
    ({"rtol": 0.0}, "rtol"), ({"hidden_dim": 0}, "hidden_dim"),
    ({"init_scale": -1.0}, "init_scale")])
def test_floater_options(options, match):
    with pytest.raises(ValueError, match=match):
        _pe("floater", **options)


def test_positions_past_exact_fp32_times_are_refused():
    """The solver's times are fp32: past 2**24 they stop increasing, which torchdiffeq
    reports as 't must be strictly increasing'; FLOATER says which positions it serves."""
    pe = build_encoding("floater", n_heads=2, head_dim=4)
    with torch.no_grad(), pytest.raises(ValueError, match=r"floater serves positions "
                                        r"0\.\.16,777,215, got position 20,000,000"):
        pe.embed(torch.zeros(1, 1, 8), torch.tensor([20_000_000]))
