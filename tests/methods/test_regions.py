"""Region methods' position maps, computed by hand for small windows, chunks and sinks, and
their options checked where they are declared."""

from __future__ import annotations

import math

import pytest
import torch

from posenc.methods import build_method, relative_positions
from posenc.methods.dual_chunk import DualChunk
from posenc.methods.leaky_rerope import LeakyReRoPE
from posenc.methods.rerope import ReRoPE
from posenc.methods.self_extend import SelfExtend
from posenc.methods.streaming import StreamingLLM

NAN = float("nan")


def rel_row(method, i, n=None):
    n = i + 1 if n is None else n
    return relative_positions(method, torch.tensor([i]), torch.arange(n))[0].tolist()


def _same(row, expected):
    assert len(row) == len(expected)
    for got, want in zip(row, expected):
        assert (math.isnan(got) and math.isnan(want)) or got == pytest.approx(want)


# ------------------------------------------------------------ position maps by hand
def test_self_extend_map():
    """W = 4, G = 2, query 9: keys 6..9 exact (3..0); keys 0..5: 9//2 - j//2 + 4 - 2."""
    _same(rel_row(SelfExtend(4, 2), 9), [6, 6, 5, 5, 4, 4, 3, 2, 1, 0])
    _same(rel_row(SelfExtend(4, 2), 2), [2, 1, 0])            # inside W: plain RoPE


def test_self_extend_shift_is_algorithm_1s_integer():
    """W = 5, G = 2 (G does not divide W): grouped queries shift by W - W // G = 3, as in
    Jin et al. 2024, Algorithm 1 (not the 2.5 of W - W / G): query 9, keys 0..4 at
    9 // 2 - j // 2 + 3; keys 5..9 exact. Every position stays an integer."""
    method = SelfExtend(5, 2)
    _same(rel_row(method, 9), [7, 7, 6, 6, 5, 4, 3, 2, 1, 0])
    grouped = method.regions(torch.arange(10), torch.arange(10))[1]
    assert not grouped.q_pos.is_floating_point() and method.longest_relative(10) == 7


@pytest.mark.parametrize("original,factor", [(32, 2.0), (32, 4.0), (512, 4.0), (4096, 4.0),
                                             (8192, 8.0)])
def test_self_extend_defaults_suit_llama_cpp(original, factor):
    """The default window is a multiple of the default group (llama.cpp's --grp-attn-w must
    be), at most original / 4, and keeps factor x original inside the original context."""
    method = build_method("self_extend", original, factor)
    assert method.window % method.group == 0 and method.window <= original // 4
    assert method.longest_relative(round(original * factor)) <= original - 1
    assert method.llama_cpp_flags() == ("--grp-attn-n", str(method.group),
                                        "--grp-attn-w", str(method.window))
    assert build_method("self_extend", 512, 4.0).settings() == {"window": 125, "group": 5}


def test_rerope_and_leaky_maps():
    _same(rel_row(ReRoPE(3), 6), [3, 3, 3, 3, 2, 1, 0])
    _same(rel_row(LeakyReRoPE(3, leak=2.0), 7), [5, 4.5, 4, 3.5, 3, 2, 1, 0])  # 3 + (d - 3)/2


def test_dual_chunk_map():
    """s = 6, w = 2: chunks of c = 4; keys at j mod 4; query 9 (chunk 2, 9 mod 4 = 1):
    intra keys 8, 9 -> 1, 0; successive keys 4..7 at min(4 + 1, 6) = 5 -> 5, 4, 3, 2;
    inter keys 0..3 at min(7, 6) = 6 -> 6, 5, 4, 3."""
    _same(rel_row(DualChunk(6, 2), 9), [6, 5, 4, 3, 5, 4, 3, 2, 1, 0])
    _same(rel_row(DualChunk(6, 2), 3), [3, 2, 1, 0])                    # intra: plain
    # query 7 (chunk 1, at 3): successive keys 0..3 from min(4 + 3, 6) = 6 (capped)
    _same(rel_row(DualChunk(6, 2), 7), [6, 5, 4, 3, 3, 2, 1, 0])


def test_streaming_map():
    """2 sinks, window 3: query 9 sees keys 0, 1 (from slot 4) and 7, 8, 9."""
    _same(rel_row(StreamingLLM(2, 3), 9), [4, 3, NAN, NAN, NAN, NAN, NAN, 2, 1, 0])
    _same(rel_row(StreamingLLM(2, 3), 4), [4, 3, 2, 1, 0])


def test_bad_options_are_refused():
    with pytest.raises(ValueError, match="window must be a positive integer"):
        SelfExtend(0, 2)
    with pytest.raises(ValueError, match="leak must be a number > 1"):
        LeakyReRoPE(4, leak=1.0)
    with pytest.raises(ValueError, match="local_window must be smaller than chunk_size"):
        DualChunk(4, 4)
    with pytest.raises(ValueError, match="unknown extension method 'foo'"):
        build_method("foo", 32, 2.0)


@pytest.mark.parametrize("name", ["self_extend", "rerope", "leaky_rerope", "dual_chunk",
                                  "streaming"])
def test_defaults_keep_relative_positions_inside_the_original_context(name):
    method = build_method(name, 32, 4.0)
    rel = relative_positions(method, torch.arange(128), torch.arange(128))
    assert float(rel.nan_to_num(0).max()) <= 31
