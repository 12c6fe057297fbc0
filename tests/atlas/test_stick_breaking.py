"""The atlas's stick-breaking panel holds stick-breaking weights beside a softmax's from the
same logits: the nearest of two equal logits takes the stick, the softmax splits them."""

from __future__ import annotations

import pytest
import torch

from posenc.atlas.stick_breaking import PEAKS, map_weights, row_weights, stick_breaking_panel

pytestmark = pytest.mark.usefixtures("single_thread")


def test_the_nearest_equal_logit_takes_the_stick():
    row = row_weights()
    early, late = PEAKS
    assert row["softmax"][early] == pytest.approx(float(row["softmax"][late]))
    assert row["stick_breaking"][late] > 50 * row["stick_breaking"][early]
    assert float(row["softmax"].sum()) == pytest.approx(1.0)
    assert float(row["stick_breaking"].sum()) < 1.0


def test_maps_are_causal_and_rows_sum_to_at_most_one(tmp_path):
    maps = map_weights()
    stick, soft = maps["stick_breaking"], maps["softmax"]
    assert (stick.triu() == 0).all() and (soft.triu(1) == 0).all()
    torch.testing.assert_close(stick.sum(-1) + maps["remainder"],
                               torch.ones(stick.shape[0], dtype=torch.float64))
    panel = stick_breaking_panel(tmp_path)
    assert (tmp_path / "stick_breaking.png").stat().st_size > 20_000
    assert panel.images == ["stick_breaking.png"] and "Tan et al. 2025" in panel.caption
