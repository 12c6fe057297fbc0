"""TransformerLM with positions per axis (A, B, T) for encodings that read several axes
(M-RoPE: 3, axial RoPE: 2): text axes equal RoPE, cached decoding equals a full forward,
padded rows equal rows alone, wrong shapes are refused."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from tests.helpers import tiny_lm_factory

pytestmark = pytest.mark.usefixtures("single_thread")

B, T = 2, 10


def _axes(n_axes, batch=B, length=T, seed=0):
    """Random positions per axis, (A, B, T)."""
    return torch.randint(0, 40, (n_axes, batch, length),
                         generator=torch.Generator().manual_seed(seed))


def _ids(batch=B, length=T, seed=0):
    return torch.randint(0, 48, (batch, length), generator=torch.Generator().manual_seed(seed))


@torch.no_grad()
def test_mrope_text_axes_equal_rope():
    mrope = tiny_lm_factory("mrope")
    rope = tiny_lm_factory("rope")
    rope.load_state_dict(mrope.state_dict())
    ids = _ids()
    text = torch.arange(T).expand(3, B, T)
    assert_close(mrope(ids, positions=text), rope(ids), rtol=0, atol=0)
    assert_close(mrope(ids), rope(ids), rtol=0, atol=0)
    assert (mrope(ids, positions=_axes(3)) - rope(ids)).abs().max() > 1e-3   # axes are read


@pytest.mark.parametrize("pe,n_axes", [("mrope", 3), ("axial_rope", 2)])
@torch.no_grad()
def test_cached_decoding_with_axes_equals_full_forward(pe, n_axes):
    model = tiny_lm_factory(pe)
    ids, axes = _ids(), _axes(n_axes)
    full = model(ids, positions=axes)
    caches = model.make_caches(B, T)
    steps = [model(ids[:, :6], positions=axes[..., :6], caches=caches)]
    for i in range(6, T):
        steps.append(model(ids[:, i:i + 1], positions=axes[..., i:i + 1], caches=caches))
    assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("pe,n_axes", [("mrope", 3), ("axial_rope", 2)])
@torch.no_grad()
def test_padded_rows_with_axes_equal_rows_alone(pe, n_axes):
    model = tiny_lm_factory(pe)
    ids, axes = _ids(1, 6), _axes(n_axes, 1, 6)
    alone = model(ids, positions=axes)
    padded_ids = torch.cat([torch.zeros(1, 3, dtype=torch.long), ids], dim=1)
    padded_axes = torch.cat([torch.zeros(n_axes, 1, 3, dtype=torch.long), axes], dim=2)
    mask = torch.tensor([[0, 0, 0, 1, 1, 1, 1, 1, 1]])
    got = model(padded_ids, positions=padded_axes, attention_mask=mask)
    assert_close(got[:, 3:], alone, atol=1e-5, rtol=1e-5)


@torch.no_grad()
def test_wrong_axis_positions_are_refused():
    ids = _ids()
    with pytest.raises(ValueError, match=r"need an encoding with several position axes"):
        tiny_lm_factory("rope")(ids, positions=_axes(3))
    mrope = tiny_lm_factory("mrope")
    with pytest.raises(ValueError, match=r"positions must have shape \(3, 10\) or \(3, 2, "
                                         r"10\).*got shape \(2, 2, 10\)"):
        mrope(ids, positions=_axes(2))
    with pytest.raises(ValueError, match=r"positions must have shape .*\(3, 2, 10\).*got "
                                         r"shape \(3, 1, 10\)"):
        mrope(ids, positions=_axes(3, batch=1))
    with pytest.raises(ValueError, match="integer tensor"):
        mrope(ids, positions=_axes(3).float())
