"""The model configs' shared fields (ModelShape): configs saved before they were shared still
load and equal, to_dict keeps each config's own key order, the shared checks are the same in
both configs, and a config that is not a mapping is a one-line error."""

from __future__ import annotations

from dataclasses import fields

import pytest

from posenc.errors import UserError
from posenc.models import LMConfig, Seq2SeqConfig
from posenc.models.config import ModelShape
from tests.helpers import raises_one_line

#: ``LMConfig(pe="alibi", pe_options={"bidirectional": False}, d_ff=64,
#: norm="rmsnorm").to_dict()`` as saved before the shared fields moved to ModelShape
SAVED_LM = {
    "vocab_size": 256, "d_model": 128, "n_layers": 2, "n_heads": 4, "max_len": 256,
    "d_ff": 64, "activation": "gelu", "norm": "rmsnorm", "norm_eps": 1e-05,
    "norm_placement": "pre", "dropout": 0.0, "bias": False, "tie_embeddings": True,
    "pe": "alibi", "pe_options": {"bidirectional": False}, "attn_backend": "auto"}
#: ``Seq2SeqConfig(src_vocab_size=100, share_embeddings=False, decoder_pe="t5",
#: decoder_pe_options={}).to_dict()`` as saved then
SAVED_SEQ2SEQ = {
    "vocab_size": 256, "src_vocab_size": 100, "d_model": 128, "n_encoder_layers": 2,
    "n_decoder_layers": 2, "n_heads": 4, "max_len": 256, "d_ff": None, "activation": "gelu",
    "norm": "layernorm", "norm_eps": 1e-05, "norm_placement": "pre", "dropout": 0.0,
    "bias": False, "share_embeddings": False, "tie_embeddings": True, "encoder_pe": "rope",
    "encoder_pe_options": {}, "decoder_pe": "t5", "decoder_pe_options": {},
    "attn_backend": "auto"}


def test_saved_configs_load_equal_and_write_back_identically():
    lm = LMConfig.from_dict(SAVED_LM)
    assert lm == LMConfig(pe="alibi", pe_options={"bidirectional": False}, d_ff=64,
                          norm="rmsnorm")
    assert list(lm.to_dict().items()) == list(SAVED_LM.items())
    s2s = Seq2SeqConfig.from_dict(SAVED_SEQ2SEQ)
    assert s2s == Seq2SeqConfig(src_vocab_size=100, share_embeddings=False, decoder_pe="t5",
                                decoder_pe_options={})
    assert list(s2s.to_dict().items()) == list(SAVED_SEQ2SEQ.items())


@pytest.mark.parametrize("cls", [LMConfig, Seq2SeqConfig])
def test_dict_order_names_every_field_once(cls):
    assert sorted(cls.DICT_ORDER) == sorted(f.name for f in fields(cls))
    assert set(f.name for f in fields(ModelShape)) <= set(cls.DICT_ORDER)


@pytest.mark.parametrize("cls", [LMConfig, Seq2SeqConfig])
@pytest.mark.parametrize("data", [[1, 2], "n_heads=4", None])
def test_from_dict_of_a_non_mapping_is_one_line(cls, data):
    message = raises_one_line(f"{cls.__name__} must be a mapping", cls.from_dict, data)
    assert "list" in message or "str" in message or "NoneType" in message
    with pytest.raises(UserError):
        cls.from_dict(data)


@pytest.mark.parametrize("cls", [LMConfig, Seq2SeqConfig])
@pytest.mark.parametrize("field,value,message", [
    ("norm_eps", 0.0, r"norm_eps must be a number in \(0.0, 1.0\), got 0.0"),
    ("norm_eps", True, r"norm_eps must be a number in \(0.0, 1.0\), got True"),
    ("norm_eps", float("nan"), r"norm_eps must be a number in \(0.0, 1.0\), got nan"),
    ("n_heads", 3, r"n_heads=3 must divide d_model=128; valid n_heads are its divisors"),
    ("d_ff", 0, r"d_ff must be an integer >= 1, got 0"),
    ("tie_embeddings", 1, r"tie_embeddings must be True or False, got 1"),
])
def test_shared_fields_are_checked_alike(cls, field, value, message):
    raises_one_line(message, cls, **{field: value})


def test_unknown_keys_name_the_config():
    raises_one_line(r"unknown Seq2SeqConfig key\(s\) pe; valid: .*encoder_pe",
                    Seq2SeqConfig.from_dict, {"pe": "rope"})
    raises_one_line(r"unknown LMConfig key\(s\) encoder_pe; valid: .*pe_options",
                    LMConfig.from_dict, {"encoder_pe": "rope"})
