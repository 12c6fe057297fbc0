"""2-D axial RoPE: an explicit float64 rotation, scores that depend only on (dr, dc) along
each axis separately, 1-D positions read as a raster scan, option errors."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from posenc.encodings import build_encoding
from posenc.encodings.context import HookContext

pytestmark = pytest.mark.usefixtures("single_thread")

D = 16


def _axial(**options):
    return build_encoding("axial_rope", n_heads=2, head_dim=D, **options)


def _rotated(pe, x, rows, cols):
    axes = torch.stack([rows, cols])
    return pe.transform_qk(x, x, HookContext.for_positions(rows, axes=axes))[0]


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_matches_explicit_rotation(layout):
    pe = _axial(layout=layout, theta=100.0)
    x = torch.randn(1, 2, 5, D, generator=torch.Generator().manual_seed(0))
    rows, cols = torch.tensor([0, 0, 3, 7, 70_001]), torch.tensor([0, 5, 2, 7, 3])
    got = _rotated(pe, x, rows, cols)
    want = x.double().clone()
    for i in range(D // 2):               # pair i: the row's for i < 4, else the column's
        t = i % (D // 4)
        pos = rows if i < D // 4 else cols
        assert pe.inv_freq[t].item() == pytest.approx(100.0 ** (-t / (D // 4)), rel=1e-7)
        angle = pos.double() * pe.inv_freq[t].double()     # exact products of the fp32 ones
        a, b = (i, i + D // 2) if layout == "half" else (2 * i, 2 * i + 1)
        c, s = angle.cos(), angle.sin()
        want[..., a] = c * x[..., a].double() - s * x[..., b].double()
        want[..., b] = s * x[..., a].double() + c * x[..., b].double()
    assert_close(got.double(), want, atol=1e-5, rtol=0)


def test_scores_depend_only_on_row_and_column_offsets():
    pe = _axial()
    g = torch.Generator().manual_seed(1)
    q, k = torch.randn(1, 2, 1, D, generator=g), torch.randn(1, 2, 1, D, generator=g)

    def score(r1, c1, r2, c2):
        qr = _rotated(pe, q, torch.tensor([r1]), torch.tensor([c1]))
        kr = _rotated(pe, k, torch.tensor([r2]), torch.tensor([c2]))
        return (qr * kr).sum()

    base = score(2, 3, 5, 1)                                    # (dr, dc) = (3, -2)
    for shift_r, shift_c in ((1, 0), (0, 9), (40, 17)):         # each axis alone and both
        assert_close(score(2 + shift_r, 3 + shift_c, 5 + shift_r, 1 + shift_c), base,
                     atol=1e-4, rtol=0)
    assert (score(2, 3, 6, 1) - base).abs() > 1e-3              # dr matters
    assert (score(2, 3, 5, 2) - base).abs() > 1e-3              # dc matters
    assert (score(2, 3, 1, 5) - base).abs() > 1e-3              # (dc, dr) swapped differs


def test_one_dimensional_positions_are_a_raster_scan():
    pe = _axial(grid_width=4)
    x = torch.randn(1, 2, 9, D, generator=torch.Generator().manual_seed(2))
    pos = torch.arange(9)
    got = pe.transform_qk(x, x, HookContext.for_positions(pos))[0]
    assert_close(got, _rotated(pe, x, pos // 4, pos % 4), rtol=0, atol=0)
    batch = torch.stack([pos, pos + 3])                     # per-sequence positions too
    got = pe.transform_qk(x.expand(2, -1, -1, -1), x.expand(2, -1, -1, -1),
                          HookContext.for_positions(batch))[0]
    assert_close(got[1:], _rotated(pe, x, (pos + 3) // 4, (pos + 3) % 4))


@pytest.mark.parametrize("head_dim,options,message", [
    (6, {}, "head_dim divisible by 4.*head_dim=6"),
    (16, {"grid_width": 0}, "grid_width must be an integer >= 1"),
    (16, {"layout": "neox"}, "layout must be one of"),
    (16, {"theta": 1.0}, r"theta must be a number in \(1.0, inf\)"),
])
def test_bad_options_are_named(head_dim, options, message):
    with pytest.raises(ValueError, match=message):
        build_encoding("axial_rope", n_heads=2, head_dim=head_dim, **options)
