"""Bad input to the library API raises ValueError with a one-line message naming what is
wrong, before anything runs: token ids outside the vocabulary, positions of the wrong shape
or dtype, integer q/k, a bias for the wrong number of heads, malformed config values."""

from __future__ import annotations

import pytest
import torch

from posenc import LMConfig, TransformerLM
from posenc.models.generate import select_next
from posenc.models.seq2seq_config import Seq2SeqConfig

from tests.helpers import context_options, raises_one_line as _raises

pytestmark = pytest.mark.usefixtures("single_thread")

VOCAB = 16


def _lm(pe: str = "rope") -> TransformerLM:
    return TransformerLM(LMConfig(vocab_size=VOCAB, d_model=16, n_heads=2, n_layers=1,
                                  max_len=32, pe=pe,
                                  pe_options=context_options(pe, VOCAB))).eval()


# ---------------------------------------------------------------------- configs
@pytest.mark.parametrize("field,value,message", [
    ("dropout", "0.1", r"dropout must be a number in \[0.0, 1.0\), got '0.1'"),
    ("dropout", None, r"dropout must be a number in \[0.0, 1.0\), got None"),
    ("dropout", True, r"dropout must be a number"),
    ("pe_options", [("theta", 10.0)], r"pe_options must be a dict of encoding options"),
    ("pe_options", "theta=10", r"pe_options must be a dict"),
    ("pe", None, r"pe must be the name of an encoding"),
    ("bias", "no", r"bias must be True or False, got 'no'"),
    ("tie_embeddings", 1, r"tie_embeddings must be True or False"),
    ("attn_backend", "fast", r"attn_backend must be one of"),
])
def test_lm_config_values_are_checked(field, value, message):
    _raises(message, LMConfig, **{field: value})


def test_lm_config_pe_options_none_means_no_options():
    config = LMConfig(pe_options=None)
    assert config.pe_options == {}
    assert LMConfig.from_dict(config.to_dict()) == LMConfig()
    assert TransformerLM(LMConfig(d_model=16, n_heads=2, n_layers=1, pe_options=None))


@pytest.mark.parametrize("field,value,message", [
    ("dropout", "0.1", r"dropout must be a number in \[0.0, 1.0\), got '0.1'"),
    ("encoder_pe_options", [1], r"encoder_pe_options must be a dict"),
    ("decoder_pe_options", "x", r"decoder_pe_options must be a dict"),
    ("encoder_pe", None, r"encoder_pe must be the name of an encoding"),
    ("decoder_pe", 3, r"decoder_pe must be the name of an encoding"),
])
def test_seq2seq_config_values_are_checked(field, value, message):
    _raises(message, Seq2SeqConfig, **{field: value})


def test_seq2seq_config_encoder_options_none_means_no_options():
    assert Seq2SeqConfig(encoder_pe_options=None).encoder_pe_options == {}
    assert Seq2SeqConfig(decoder_pe_options=None).decoder_pe_options is None   # "reuse"


@pytest.mark.parametrize("kwargs,message", [
    ({"temperature": "1"}, "temperature must be a number"),
    ({"temperature": float("nan")}, "temperature must be a number"),
    ({"temperature": 1.0, "top_k": True}, "top_k must be a positive int"),
])
def test_sampling_arguments_are_checked(kwargs, message):
    _raises(message, select_next, torch.randn(1, VOCAB), **kwargs)


def test_generate_checks_max_new_tokens():
    _raises(r"max_new_tokens must be an integer >= 0, got '2'", _lm().generate,
            torch.zeros(1, 2, dtype=torch.long), "2")


def test_generate_checks_its_prompt():
    _raises(r"ids must be \(batch, length\), got list", _lm().generate, [[1, 2]], 2)
    _raises(r"ids must be \(batch, length\), got shape \(2,\)", _lm().generate,
            torch.tensor([1, 2]), 2)
