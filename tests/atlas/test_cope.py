"""The atlas's CoPE panel: with the hand-set gates, CoPE's positions count the sentence ends
between a key and its query (counted by hand), and with every gate open they are the token
distance plus one."""

from __future__ import annotations

import json

import pytest
import torch

from posenc.atlas.cope import cope_panel, counted_positions, words
from posenc.atlas.figure import as_json

pytestmark = pytest.mark.usefixtures("single_thread")


def test_sentence_gates_count_sentence_ends_by_hand():
    tokens = words("A b. C d. E.")
    assert tokens == ["A", "b", ".", "C", "d", ".", "E", "."]
    ends = [tok == "." for tok in tokens]
    gates, pos = counted_positions(ends)
    n = len(tokens)
    for i in range(n):
        for j in range(i + 1):
            assert pos[i, j].item() == pytest.approx(sum(ends[j:i + 1]), abs=5e-3)
    assert bool((pos.triu(1) == 0).all()) and bool((gates.triu(1) == 0).all())
    assert gates[-1, 2].item() > 0.999 and gates[-1, 0].item() < 1e-3


def test_open_gates_give_the_token_distance():
    _, pos = counted_positions([True] * 6)
    want = torch.tensor([[i - j + 1 if j <= i else 0 for j in range(6)] for i in range(6)],
                        dtype=torch.float32)
    torch.testing.assert_close(pos, want, atol=5e-3, rtol=0)


def test_panel_numbers(tmp_path):
    data = json.loads(json.dumps(as_json(cope_panel(tmp_path).data)))
    assert (tmp_path / "cope_positions.png").stat().st_size > 20_000
    heads = data["heads"]
    sentence = heads["sentence ends (gate on '.')"]
    assert sentence["gated"] == [tok == "." for tok in data["tokens"]]
    assert sentence["positions"][-1][0] == pytest.approx(4, abs=1e-2)   # four sentences
    every = heads["every token (gate on all)"]
    assert every["positions"][-1][0] == pytest.approx(len(data["tokens"]), abs=1e-2)
