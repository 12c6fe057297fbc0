"""The encoder-decoder config: values checked, round trips and unknown keys, the
encoder's bidirectional option."""

from __future__ import annotations

import pytest

from posenc import Seq2SeqTransformer, list_encodings
from posenc.encodings import encoding_options
from posenc.models.seq2seq_config import Seq2SeqConfig
from tests.helpers import raises_one_line as _raises

pytestmark = pytest.mark.usefixtures("single_thread")


@pytest.mark.parametrize("kwargs, option", [
    ({"d_model": 16, "n_heads": 3}, "n_heads"),
    ({"n_encoder_layers": 0}, "n_encoder_layers"),
    ({"src_vocab_size": 0, "share_embeddings": False}, "src_vocab_size"),
    ({"src_vocab_size": 10, "vocab_size": 20}, "share_embeddings"),
    ({"dropout": 1.0}, "dropout"),
    ({"norm": "batchnorm"}, "norm"),
    ({"norm_eps": 0.0}, "norm_eps"),
    ({"norm_placement": "middle"}, "norm_placement"),
    ({"attn_backend": "cuda"}, "attn_backend"),
    ({"encoder_pe": "no_such_encoding"}, "unknown encoding"),
    ({"decoder_pe": "no_such_encoding"}, "unknown encoding"),
])
def test_config_rejects_bad_values(kwargs, option):
    with pytest.raises(ValueError, match=option):
        Seq2SeqConfig(**kwargs)


def test_config_round_trip_and_unknown_keys():
    cfg = Seq2SeqConfig(encoder_pe="alibi", decoder_pe="rope", share_embeddings=False,
                        src_vocab_size=77)
    assert Seq2SeqConfig.from_dict(cfg.to_dict()) == cfg
    with pytest.raises(ValueError, match="unknown Seq2SeqConfig key.*n_layers"):
        Seq2SeqConfig.from_dict({"n_layers": 2})
    with pytest.raises(ValueError, match="unknown option"):
        Seq2SeqTransformer(Seq2SeqConfig(encoder_pe="rope", encoder_pe_options={"slope": 1}))


@pytest.mark.parametrize("name", [n for n in list_encodings()
                                  if "bidirectional" in encoding_options(n)])
def test_encoder_gets_bidirectional_unless_set(name):
    cfg = Seq2SeqConfig(encoder_pe=name)
    assert cfg.encoder_options()["bidirectional"] is True
    assert "bidirectional" not in cfg.decoder_options()
    user = Seq2SeqConfig(encoder_pe=name, encoder_pe_options={"bidirectional": False})
    assert user.encoder_options()["bidirectional"] is False


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
