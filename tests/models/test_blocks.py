"""Initialisation of the models: the width-aware rule for linear layers and embeddings,
scaled residual outputs, unit-scale initial logits for every encoding, and an encoding's own
init left alone."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from posenc.encodings import list_encodings
from posenc.models.blocks import embedding_init_std, linear_init_std
from posenc.models.seq2seq import Seq2SeqTransformer
from posenc.models.seq2seq_config import Seq2SeqConfig
from tests.helpers import model_for

pytestmark = pytest.mark.usefixtures("single_thread")


def test_linear_std_follows_width_and_residual_outputs_are_scaled():
    torch.manual_seed(0)
    model = model_for("nope", d_model=128, n_layers=3)
    block = model.blocks[1]
    residual = 1 / math.sqrt(2 * 3)
    expected = {block.mlp.up: linear_init_std(128), block.mlp.down: linear_init_std(512) *
                residual, block.attn.out_proj: linear_init_std(128) * residual}
    for module, std in expected.items():
        assert module.weight.std().item() == pytest.approx(std, rel=0.05)
    assert model.tok.weight.std().item() == pytest.approx(embedding_init_std(128), rel=0.05)
    assert model.head.weight is model.tok.weight
    # GPT-2's 0.02 is the width-768 value of the rule
    assert linear_init_std(768) == pytest.approx(0.02, rel=0.15)


def test_untied_head_gets_the_linear_rule():
    model = model_for("nope", d_model=128, tie_embeddings=False)
    assert model.head.weight.std().item() == pytest.approx(linear_init_std(128), rel=0.05)


@pytest.mark.parametrize("pe", list_encodings())
def test_initial_logits_are_unit_scale_for_every_encoding(pe):
    """At initialisation the logits have std near 1 (the tied embedding's 1/sqrt(d) rule)
    and the loss on random targets is within 1.5 nats of log(V) (the input token, tied to
    its output row, scores highest): no encoding blows them up."""
    torch.manual_seed(0)
    model = model_for(pe)
    ids, targets = torch.randint(0, 64, (2, 2, 32))
    with torch.no_grad():
        logits = model(ids)
    loss = nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten())
    assert 0.6 < logits.std().item() < 1.6
    assert abs(loss.item() - math.log(64)) < 1.5


def test_the_model_leaves_an_encodings_own_init_alone():
    """An encoding's init options reach the model (the model's init skips encodings)."""
    torch.manual_seed(0)
    model = model_for("xl", pe_options={"init_std": 0.5})
    assert model.pe.pos_proj.weight.std().item() == pytest.approx(0.5, rel=0.1)
    model = model_for("learned", pe_options={"init_std": 0.3})
    assert model.pe.table.std().item() == pytest.approx(0.3, rel=0.1)


def test_seq2seq_uses_the_same_rule():
    torch.manual_seed(0)
    model = Seq2SeqTransformer(Seq2SeqConfig(vocab_size=64, d_model=128, n_heads=4,
                                             n_encoder_layers=2, n_decoder_layers=2,
                                             max_len=32))
    layer = model.decoder[0]
    assert layer.mlp.up.weight.std().item() == pytest.approx(linear_init_std(128), rel=0.05)
    assert layer.cross.out_proj.weight.std().item() == pytest.approx(
        linear_init_std(128) / math.sqrt(6), rel=0.05)
