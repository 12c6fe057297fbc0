"""The optimizer's parameter groups: every parameter once, position parameters, norms and
biases never decayed, and the T5 table's learning rate."""

from __future__ import annotations

import math

import pytest
import torch

from posenc.encodings import list_encodings
from posenc.encodings.base import PositionalEncoding
from posenc.train.optim import param_groups
from tests.helpers import model_for

pytestmark = pytest.mark.usefixtures("single_thread")


@pytest.mark.parametrize("pe", list_encodings())
def test_param_groups_cover_every_parameter_once(pe):
    model = model_for(pe)
    groups = param_groups(model, 0.1, 1e-3)
    seen = [id(p) for g in groups for p in g["params"]]
    assert len(seen) == len(set(seen))
    assert set(seen) == {id(p) for p in model.parameters() if p.requires_grad}
    decayed = {id(p) for g in groups if g["weight_decay"] > 0 for p in g["params"]}
    position = {id(p) for m in model.modules() if isinstance(m, PositionalEncoding)
                for p in m.parameters()}
    assert not decayed & position                       # position parameters never decay
    for name, p in model.named_parameters():
        if p.dim() < 2:                                 # norms and biases never decay
            assert id(p) not in decayed, name
        elif id(p) not in position:                     # matrices of the network do
            assert id(p) in decayed, name
    # torch.optim accepts the groups
    torch.optim.AdamW(groups, lr=1e-3)


def test_param_groups_skip_frozen_parameters_and_empty_groups():
    model = model_for("alibi")
    for p in model.parameters():
        if p.dim() < 2:
            p.requires_grad_(False)
    groups = param_groups(model, 0.1, 1e-3)
    assert len(groups) == 1 and groups[0]["weight_decay"] == 0.1


def test_t5_table_trains_at_sqrt_head_dim_times_the_lr():
    model = model_for("t5", d_model=128, n_heads=4)              # head_dim 32
    groups = param_groups(model, 0.1, 1e-3)
    table = model.pe.bias.weight
    (group,) = [g for g in groups if any(p is table for p in g["params"])]
    assert group["lr"] == pytest.approx(1e-3 * math.sqrt(32))
    assert group["weight_decay"] == 0.0 and len(group["params"]) == 1
    assert groups[0]["lr"] == 1e-3                               # what the log reports
    # the table still holds logits: score_bias is a plain lookup
    assert table.std().item() == pytest.approx(0.02, rel=0.3)
