"""The atlas's PaTH panel: with the hand-set factors, a reflection on sentence ends gives the
parity of the sentence ends between key and query (counted by hand), a projection erases the
keys behind one, and RoPE's row for the same vectors is a function of the distance."""

from __future__ import annotations

import json

import pytest
import torch

from posenc.atlas.cope import words
from posenc.atlas.figure import as_json
from posenc.atlas.path import path_panel, rope_logits, sentence_logits

pytestmark = pytest.mark.usefixtures("single_thread")


def test_reflections_give_the_parity_and_projections_erase():
    tokens = words("A b. C d. E.")
    ends = [tok == "." for tok in tokens]
    reflect, erase = sentence_logits(tokens, 2.0), sentence_logits(tokens, 1.0)
    n = len(tokens)
    for i in range(n):
        for j in range(i + 1):
            between = sum(ends[j + 1:i + 1])               # the factors H_{j+1} .. H_i
            assert reflect[i, j].item() == pytest.approx((-1) ** between, abs=1e-5)
            assert erase[i, j].item() == pytest.approx(float(between == 0), abs=1e-5)
    assert bool((reflect.triu(1) == 0).all())


def test_rope_row_depends_on_the_distance_only():
    rope = rope_logits(9)
    for d in range(9):
        diagonal = torch.diagonal(rope, -d)
        torch.testing.assert_close(diagonal, diagonal[:1].expand_as(diagonal))


def test_panel_numbers(tmp_path):
    data = json.loads(json.dumps(as_json(path_panel(tmp_path).data)))
    assert (tmp_path / "path_transform.png").stat().st_size > 20_000
    tokens = data["tokens"]
    reflect = data["heads"]["reflect at '.' (beta = 2)"]["logits"]
    last = len(tokens) - 1
    ends_after_first = sum(tok == "." for tok in tokens[1:])
    assert reflect[last][0] == pytest.approx((-1) ** ends_after_first, abs=1e-5)
    assert data["rope"]["logits"][last][last] == pytest.approx(1.0, abs=1e-5)
