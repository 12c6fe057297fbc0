"""Self-Extend in llama.cpp (``llama-completion --grp-attn-n G --grp-attn-w W``) against posenc's,
through llama-cpp-python's KV-cache calls, replaying what llama.cpp's tool does with them.

llama.cpp's tool does Self-Extend on its KV cache, not in attention (``tools/completion``; the
passkey example alike): before each batch, every complete block of W cached keys is moved to
positions floor(p / G) (``llama_memory_seq_div``), the keys after it are moved down to follow
(``llama_memory_seq_add``), and new tokens go on from there. A key has one position at a time,
so query i = kW + r (0 <= r < W) sees the keys of its own block exactly and the earlier ones
at relative position kW / G + r - floor(j / G) (the *block map*). The paper's map (Jin et al.
2024, Algorithm 1; posenc's ``self_extend``) has a neighbour window of the last W keys and the
grouped relative position floor(i / G) - floor(j / G) + W - W // G. The two agree for i < W
and for i = W - 1 mod W (where the query's block is its last W keys), nowhere else; llama.cpp's
author said as much (llama.cpp issue 4886: "not exactly the same as it applies changes
(shifts) to the KV cache instead of recomputing the RoPE").

And llama.cpp's ``seq_div`` re-rotates the keys it moves the wrong way round (the llama.cpp of
llama-cpp-python 0.3.36, ``src/llama-kv-cells.h``: ``pos_div`` records the shift as
old - new where ``pos_add`` records new - old): a key divided from p to floor(p / G) is
rotated to 2p - floor(p / G). ``seq_add`` is exact. So the tests grant llama.cpp an exact
divide (each position moved on its own by ``seq_add``, :func:`exact_divide`) to show the
block map, and check llama.cpp's own divide against that wrong-way map:

- one layer (logits at i depend on query i's map alone): posenc's ``self_extend`` equals
  llama.cpp with an exact divide where the two maps agree, and differs elsewhere;
- two layers: posenc scoring the block map (a region method written here) equals llama.cpp
  with an exact divide at every position, fed one token or W tokens at a time (more than W
  at a time, llama.cpp reads a batch at plain positions before grouping it);
- llama.cpp's own ``--grp-attn`` (its ``seq_div``) equals posenc scoring grouped keys
  rotated to 2j - floor(j / G): the flags do not reproduce posenc's Self-Extend.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
import torch

from tests.hf.helpers import T
from tests.hf.helpers import logits_of as _logits
from tests.hf.helpers import peaked_model as _model
from tests.hf.helpers import tiny_config as _config

pytest.importorskip("transformers")
pytest.importorskip("gguf")
pytest.importorskip("llama_cpp")

from posenc.hf import extend, restore  # noqa: E402
from posenc.hf.gguf_export import recorded_flags, write_gguf  # noqa: E402
from posenc.methods import Option, register_method, unregister_method  # noqa: E402
from posenc.methods.regions import Region, RegionMethod, distance  # noqa: E402
from tests.hf.llama_cpp_runner import LlamaCpp  # noqa: E402

ATOL, RTOL = 2e-4, 1e-4                 # as for the frequency methods (test_llama_cpp_rope)
W, G = 8, 4


def exact_divide(llm: LlamaCpp, p0: int, p1: int, group: int) -> None:
    """Positions in [p0, p1) //= group, each moved on its own by ``seq_add`` (exact), in
    increasing order (a moved key lands below every key not yet moved)."""
    for p in range(max(p0, 1), p1):
        llm.seq_add(p, p + 1, p // group - p)


def grouped_decode(llm: LlamaCpp, ids: list[int], group: int, window: int, batch: int = 1,
                   divide=None) -> np.ndarray:
    """llama.cpp's Self-Extend over ``ids`` fed ``batch`` tokens at a time: before each
    batch, each complete block of ``window`` cached tokens past those already grouped is
    divided by ``group`` (``divide``: llama.cpp's ``seq_div`` unless given) and the tokens
    after it follow on. (T, vocab)."""
    divide = divide or (lambda p0, p1, d: llm.seq_div(p0, p1, d))
    llm.clear()
    grouped = cached = 0               # grouped: positions taken by grouped blocks
    out = []
    for start in range(0, len(ids), batch):
        while cached >= grouped + window:
            # the ungrouped keys, moved down by the earlier passes, go back to their own
            # positions; the first W of them are divided by G; the rest follow them on
            back = (grouped * group // window) * (window // group) * (group - 1)
            llm.seq_add(grouped, cached, back)
            divide(grouped + back, grouped + back + window, group)
            llm.seq_add(grouped + back + window, cached + back,
                        window // group - back - window)
            cached -= (window // group) * (group - 1)
            grouped += window // group
        chunk = ids[start:start + batch]
        out.append(llm.decode(chunk, list(range(cached, cached + len(chunk)))))
        cached += len(chunk)
    return np.concatenate(out)


@dataclass(frozen=True)
class LlamaCppBlocks(RegionMethod):
    """llama.cpp's block map: query i = kW + r sees keys j >= kW exactly, earlier keys from
    position kW / G + r against floor(j / G) (W a multiple of G); ``wrong_way``: those keys
    rotated to 2j - floor(j / G), as llama.cpp's ``seq_div`` leaves them."""

    name = "llama_cpp_blocks"
    summary = "llama.cpp's Self-Extend on its KV cache"
    rising_runs = True
    options = (Option("window", "W", required=True), Option("group", "G", required=True),
               Option("wrong_way", "keys as llama.cpp's seq_div rotates them",
                      lambda original, factor, _: False))
    window: int
    group: int
    wrong_way: bool = False

    def longest_relative(self, length: int) -> float:
        return max(length - 1, 0)

    def regions(self, q_pos, k_pos):
        start = torch.div(q_pos, self.window, rounding_mode="floor") * self.window   # kW
        own = k_pos[None, :] >= start[:, None]
        grouped_k = torch.div(k_pos, self.group, rounding_mode="floor")
        if self.wrong_way:
            grouped_k = 2 * k_pos - grouped_k
        return [Region("block", (distance(q_pos, k_pos) >= 0) & own, q_pos, k_pos),
                Region("grouped", ~own, start // self.group + q_pos - start, grouped_k)]


@pytest.fixture(scope="module")
def blocks_method():
    register_method(LlamaCppBlocks)
    yield
    unregister_method("llama_cpp_blocks")


def _files(layers, tmp_path):
    """(model, its GGUF file as ``posenc extend --gguf`` writes self_extend, token ids,
    posenc's self_extend logits (T, V))."""
    model = _model(_config(layers=layers))
    extend(model, "self_extend", 4.0, window=W, group=G)
    try:
        path = write_gguf(model, tmp_path / f"se{layers}.gguf")
        ids = torch.randint(0, model.config.vocab_size, (1, T),
                            generator=torch.Generator().manual_seed(3))
        expected = _logits(model, ids)[0].numpy()
    finally:
        restore(model)
    assert recorded_flags(path) == f"--grp-attn-n {G} --grp-attn-w {W}"
    return model, path, ids, expected


def _posenc(model, ids, **options):
    extend(model, "llama_cpp_blocks", 4.0, window=W, group=G, **options)
    try:
        return _logits(model, ids)[0].numpy()
    finally:
        restore(model)


def test_one_layer_matches_posencs_self_extend_where_the_two_maps_agree(tmp_path):
    model, path, ids, expected = _files(1, tmp_path)
    llm = LlamaCpp(path, n_ctx=T)
    try:
        got = grouped_decode(llm, ids[0].tolist(), G, W,
                             divide=lambda p0, p1, d: exact_divide(llm, p0, p1, d))
    finally:
        llm.close()
    agree = np.array([i < W or i % W == W - 1 for i in range(T)])
    np.testing.assert_allclose(got[agree], expected[agree], atol=ATOL, rtol=RTOL)
    assert (np.abs(got - expected).max(axis=1)[~agree] > 10 * ATOL).all()


def test_two_layers_match_posenc_on_the_block_map(blocks_method, tmp_path):
    model, path, ids, paper = _files(2, tmp_path)
    expected = _posenc(model, ids)
    llm = LlamaCpp(path, n_ctx=T)
    try:
        runs = {batch: grouped_decode(llm, ids[0].tolist(), G, W, batch, lambda p0, p1, d:
                                      exact_divide(llm, p0, p1, d)) for batch in (1, W, T)}
    finally:
        llm.close()
    np.testing.assert_allclose(runs[1], expected, atol=ATOL, rtol=RTOL)
    np.testing.assert_allclose(runs[W], expected, atol=ATOL, rtol=RTOL)   # W at a time: same
    assert np.abs(runs[T][W:] - expected[W:]).max() > 100 * ATOL        # all at once: not
    # past the first window, two layers carry the maps' difference to every row
    assert (np.abs(runs[1][W:] - paper[W:]).max(axis=1) > 10 * ATOL).all()


def test_llama_cpps_own_divide_rotates_grouped_keys_the_wrong_way(blocks_method, tmp_path):
    """What ``--grp-attn-n G --grp-attn-w W`` computes in this llama.cpp: the block map with
    grouped keys rotated to 2j - floor(j / G). Should llama.cpp fix ``seq_div``, this test
    fails and the block-map test above then holds for its own divide."""
    model, path, ids, paper = _files(2, tmp_path)
    wrong_way, blocks = _posenc(model, ids, wrong_way=True), _posenc(model, ids)
    llm = LlamaCpp(path, n_ctx=T)
    try:
        got = grouped_decode(llm, ids[0].tolist(), G, W)
    finally:
        llm.close()
    np.testing.assert_allclose(got, wrong_way, atol=ATOL, rtol=RTOL)
    assert np.abs(got[W:] - blocks[W:]).max() > 100 * ATOL
    assert np.abs(got[W:] - paper[W:]).max() > 100 * ATOL
