"""Trajectory encodings (``recurrent`` and ``floater`` share the trajectory and its cache)
and ``recurrent``'s GRU: prefix-consistent trajectories, a cache that is never stale, the
recurrence, its init and options."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch.testing import assert_close

from posenc import build_encoding

H, D = 2, 4
C = H * D


def _pe(name, **options):
    return build_encoding(name, n_heads=H, head_dim=D, max_len=32, **options)


@pytest.mark.parametrize("name,options", [
    ("recurrent", {}), ("floater", {}), ("floater", {"substeps": 2, "method": "midpoint"}),
    ("floater", {"method": "dopri5"})], ids=str)
def test_trajectory_is_prefix_consistent(name, options):
    pe = _pe(name, **options)
    long, short = pe.trajectory(40), pe.trajectory(13)
    assert torch.equal(long[:13], short)
    assert (long[1:] - long[:-1]).norm(dim=-1).min() > 0      # consecutive vectors differ


def test_recurrent_follows_its_gru():
    pe = _pe("recurrent")
    traj = pe.trajectory(4)
    state = pe.p0[None]
    for k in range(4):
        assert_close(traj[k], (state * pe.scale)[0])
        state = pe.cell(torch.ones(1, 1), state)


@pytest.mark.parametrize("name", ["recurrent", "floater"])
def test_trajectory_cache_is_never_stale(name):
    pe = _pe(name)
    pos, x = torch.arange(10), torch.zeros(1, 10, C)
    with torch.no_grad():
        first = pe.embed(x, pos)
        assert_close(pe.embed(torch.zeros(1, 12, C), torch.arange(12))[:, :10], first)
        assert pe._cache is not None
    opt = torch.optim.SGD(pe.parameters(), lr=0.5)
    pe.embed(x, pos).square().sum().backward()                        # training: recomputed
    opt.step()
    with torch.no_grad():
        after = pe.embed(x, pos)
    assert (after - first).abs().max() > 1e-4
    with torch.no_grad():
        assert_close(after, pe.trajectory(10)[None])


def test_recurrent_options():
    with pytest.raises(ValueError, match=r"init_scale must be a number in \(0.0, inf\)"):
        _pe("recurrent", init_scale=0.0)


def test_recurrent_init_keeps_positions_apart():
    """The GRU init keeps consecutive positions distinct for hundreds of steps (width 64)."""
    pe = build_encoding("recurrent", n_heads=1, head_dim=64)
    with torch.no_grad():
        traj = pe.trajectory(200) / pe.scale
    assert (traj[1:] - traj[:-1]).norm(dim=-1).min() > 1e-3


@pytest.mark.parametrize("name", ["recurrent", "floater"])
def test_a_long_trajectory_warns_once_of_its_cost(name, monkeypatch):
    pe = build_encoding(name, n_heads=2, head_dim=4)
    monkeypatch.setattr(type(pe), "slow_steps", 40)     # the real bound is 100,000 steps
    x = torch.zeros(1, 1, 8)
    with torch.no_grad():
        pe.embed(x, torch.tensor([10]))                  # short: silent
        with pytest.warns(UserWarning, match=f"{name}: computing [0-9,]+ positions takes"):
            pe.embed(x, torch.tensor([50]))
        with warnings.catch_warnings():
            warnings.simplefilter("error")               # once per encoding
            pe.embed(x, torch.tensor([200]))
