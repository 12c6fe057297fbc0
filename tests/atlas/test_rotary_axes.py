"""The atlas's M-RoPE grid and p-RoPE panels: Qwen2-VL's positions for text, an image and
text (worked out by hand), the sections that read them, and the frequencies p-RoPE keeps."""

from __future__ import annotations

import json

import pytest
import torch

from posenc.atlas.figure import as_json
from posenc.atlas.rotary_axes import (
    kept_frequencies,
    mrope_panel,
    multimodal_positions,
    p_rope_panel,
)
from posenc.encodings.rope_scaling import compute_inv_freq

pytestmark = pytest.mark.usefixtures("single_thread")


def _stored(panel) -> dict:
    return json.loads(json.dumps(as_json(panel.data)))


def test_text_image_text_positions_by_hand():
    positions, kinds = multimodal_positions((("text", 2), ("image", (2, 3)), ("text", 1)))
    assert kinds == ["text"] * 2 + ["image"] * 6 + ["text"]
    # text 0, 1; the image starts at 2: t = 2, h = 2 + row, w = 2 + column; text resumes at
    # 1 + the largest position so far (2 + 2 = 4 on the width axis) = 5
    assert positions.tolist() == [[0, 1, 2, 2, 2, 2, 2, 2, 5],
                                  [0, 1, 2, 2, 2, 3, 3, 3, 5],
                                  [0, 1, 2, 3, 4, 2, 3, 4, 5]]


def test_mrope_panel_numbers(tmp_path):
    data = _stored(mrope_panel(tmp_path))
    assert (tmp_path / "mrope_grid.png").stat().st_size > 20_000
    assert data["mrope_section"] == [8, 12, 12] and sum(data["mrope_section"]) == 32
    positions = torch.tensor(data["positions"])
    text = torch.tensor([kind == "text" for kind in data["kinds"]])
    assert bool((positions[:, text] == positions[0, text]).all())    # text: one value, 3 axes
    assert positions[:, -1].tolist() == [9, 9, 9]


@pytest.mark.parametrize("partial, kept", [(1.0, 32), (0.75, 24), (0.5, 16)])
def test_p_rope_keeps_the_highest_of_ropes_own_frequencies(partial, kept):
    inv_freq = kept_frequencies(partial)
    rope, _ = compute_inv_freq(64, 1e4)
    assert int((inv_freq > 0).sum()) == kept
    assert torch.equal(inv_freq[:kept], rope[:kept])                 # unchanged, the highest
    assert bool((inv_freq[kept:] == 0).all())


def test_p_rope_panel_numbers(tmp_path):
    data = _stored(p_rope_panel(tmp_path))
    assert data["kept_pairs"] == {"1": 32, "0.75": 24, "0.5": 16}
    assert data["inv_freq"]["0.5"][16:] == [0.0] * 16
    assert (tmp_path / "p_rope.png").stat().st_size > 20_000
