"""The atlas's layer-plan and window panels hold what the library resolves: each named plan's
layers as resolve_plan gives them, and window masks equal to Window's rule by hand."""

from __future__ import annotations

import json

import pytest
import torch

from posenc.atlas.figure import as_json
from posenc.atlas.plans import (
    MASK_LEN,
    WINDOW,
    layer_plan_panel,
    plan_layers,
    window_mask_panel,
    window_visibility,
)
from posenc.models.plans import NAMED_PLANS

pytestmark = pytest.mark.usefixtures("single_thread")


def _stored(panel) -> dict:
    """The panel's numbers as atlas.json holds them."""
    return json.loads(json.dumps(as_json(panel.data)))


def test_layer_plan_rows_are_the_resolved_plans(tmp_path):
    panel = layer_plan_panel(tmp_path)
    assert (tmp_path / "layer_plan.png").stat().st_size > 20_000
    data = _stored(panel)
    assert set(data["plans"]) == {"all RoPE (plan=None)", *NAMED_PLANS}
    gemma = data["plans"]["gemma3"]
    assert len(gemma) == data["n_layers"] == 12
    globals_ = [i for i, layer in enumerate(gemma) if layer["window"] is None]
    assert globals_ == [5, 11]                                   # every sixth layer is global
    assert all(gemma[i]["theta"] == 1e6 for i in globals_)
    local = gemma[0]
    assert local == {"pe": "rope", "theta": 1e4, "window": 4096 // 4, "window_kind": "sliding"}
    smol = data["plans"]["smollm3"]
    assert [layer["pe"] for layer in smol] == ["rope", "rope", "rope", "nope"] * 3
    assert all(layer["window"] is None for layer in smol)
    llama = data["plans"]["llama4"]
    assert [layer["window_kind"] for layer in llama] == ["chunked"] * 3 + [None] + \
        ["chunked"] * 3 + [None] + ["chunked"] * 3 + [None]
    assert all(layer["pe"] == "nope" for layer in llama[3::4])
    assert data["plans"]["all RoPE (plan=None)"] == [
        {"pe": "rope", "theta": 1e4, "window": None, "window_kind": None}] * 12
    assert plan_layers({"name": "gemma3", "window": 64}, 6, 256)[0]["window"] == 64


@pytest.mark.parametrize("kind", ["sliding", "chunked"])
def test_window_masks_follow_the_rule_by_hand(kind, tmp_path):
    want = [[int(j <= i and (i - j < WINDOW if kind == "sliding" else i // WINDOW == j // WINDOW))
             for j in range(MASK_LEN)] for i in range(MASK_LEN)]
    assert window_visibility(kind).long().tolist() == want
    data = _stored(window_mask_panel(tmp_path))
    assert data["visible"][kind] == want
    assert data["sink_visible_to_every_query"] is True
    assert (tmp_path / "window_mask.png").stat().st_size > 20_000


def test_a_window_as_large_as_the_sequence_is_the_causal_mask():
    for kind in ("sliding", "chunked"):
        assert torch.equal(window_visibility(kind, size=MASK_LEN),
                           torch.ones(MASK_LEN, MASK_LEN, dtype=torch.bool).tril())
