"""Bad input to the library API raises ValueError with a one-line message naming what is
wrong, before anything runs: token ids outside the vocabulary, positions of the wrong shape
or dtype, integer q/k, a bias for the wrong number of heads, malformed config values."""

from __future__ import annotations

import pytest
import torch

from posenc import LMConfig, TransformerLM, build_encoding, list_encodings
from posenc.attention import MultiHeadAttention
from posenc.encodings.base import check_token_ids
from posenc.models.generate import select_next
from posenc.models.seq2seq import Seq2SeqTransformer
from posenc.models.seq2seq_config import Seq2SeqConfig
from tests.helpers import context_options

pytestmark = pytest.mark.usefixtures("single_thread")

VOCAB = 16


def _raises(match: str, fn, *args, **kwargs) -> str:
    """Call fn; assert a one-line ValueError matching ``match``; return the message."""
    with pytest.raises(ValueError, match=match) as err:
        fn(*args, **kwargs)
    message = str(err.value)
    assert "\n" not in message
    return message


def _lm(pe: str = "rope") -> TransformerLM:
    return TransformerLM(LMConfig(vocab_size=VOCAB, d_model=16, n_heads=2, n_layers=1,
                                  max_len=32, pe=pe,
                                  pe_options=context_options(pe, VOCAB))).eval()


def _seq2seq() -> Seq2SeqTransformer:
    return Seq2SeqTransformer(Seq2SeqConfig(vocab_size=VOCAB, src_vocab_size=12,
                                            share_embeddings=False, d_model=16, n_heads=2,
                                            n_encoder_layers=1, n_decoder_layers=1,
                                            max_len=32)).eval()


# ---------------------------------------------------------------------- token ids
@pytest.mark.parametrize("bad,shown", [(VOCAB, VOCAB), (VOCAB + 100, VOCAB + 100), (-1, -1)])
def test_token_id_outside_the_vocabulary(bad, shown):
    ids = torch.tensor([[1, 2, bad, 3]])
    message = _raises(rf"ids holds token id {shown}, outside the vocabulary \[0, {VOCAB}\)",
                      _lm(), ids)
    assert message.startswith("ids ")
    with pytest.raises(ValueError, match="outside the vocabulary"):
        _lm().generate(ids, 2)


def test_token_ids_at_the_vocabulary_edges_are_accepted():
    assert _lm()(torch.tensor([[0, VOCAB - 1]])).shape == (1, 2, VOCAB)


@pytest.mark.parametrize("ids", [torch.zeros(1, 3), torch.zeros(1, 3, dtype=torch.bool),
                                 torch.zeros(1, 3, dtype=torch.uint8)])
def test_token_ids_must_be_int64_or_int32(ids):
    _raises(r"ids must be a tensor of token ids \(int64 or int32\), got dtype", _lm(), ids)


def test_int32_token_ids_are_accepted():
    ids, model = torch.tensor([[1, 2, 3]]), _lm()
    torch.testing.assert_close(model(ids.int()), model(ids))


def test_seq2seq_token_ids_are_checked_against_their_own_vocabulary():
    model = _seq2seq()
    src, tgt = torch.tensor([[1, 11]]), torch.tensor([[0, 15]])
    assert model(src, tgt).shape == (1, 2, VOCAB)                 # both at their edges
    _raises(r"src holds token id 12, outside the vocabulary \[0, 12\)", model,
            torch.tensor([[1, 12]]), tgt)
    _raises(r"tgt_in holds token id 16, outside the vocabulary \[0, 16\)", model, src,
            torch.tensor([[0, 16]]))
    _raises(r"tgt_in holds token id -3", model, src, torch.tensor([[0, -3]]))
    _raises(r"src must be a tensor of token ids", model, src.float(), tgt)
    _raises("bos_id", model.generate, src, 2, bos_id="0")


def test_the_range_check_is_skipped_under_compile(monkeypatch):
    """Under torch.compile the value check would force a host sync: it is skipped."""
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    check_token_ids("ids", torch.tensor([[VOCAB]]), VOCAB)      # no error, no sync
    with pytest.raises(ValueError, match="int64 or int32"):      # metadata still checked
        check_token_ids("ids", torch.zeros(1, 1), VOCAB)


# ---------------------------------------------------------------------- positions
BAD_POSITIONS = [
    (torch.arange(4), r"pos must have shape \(5,\), one position per token, got shape \(4,\)"),
    (torch.arange(4).expand(2, 4), r"pos must have shape \(5,\).*got shape \(2, 4\)"),
    (torch.arange(5.0), r"pos must be an integer tensor of positions, got dtype torch.float32"),
    ([0, 1, 2, 3, 4], r"pos must be an integer tensor of positions, got list"),
]


@pytest.mark.parametrize("pe", list_encodings())
def test_positions_of_the_wrong_shape_or_dtype_are_refused(pe):
    model, ids = _lm(pe), torch.randint(0, VOCAB, (2, 5))
    for pos, message in BAD_POSITIONS:
        _raises(message, model, ids, pos=pos)


def test_attention_layer_checks_its_input():
    attn, pe = MultiHeadAttention(16, 2), build_encoding("rope", n_heads=2, head_dim=8)
    x = torch.randn(1, 5, 16)
    _raises(r"pos must have shape \(5,\)", attn, x, torch.arange(6), pe, causal=True)
    _raises(r"x must be \(batch, length, d_model=16\), got shape \(1, 5, 12\)", attn,
            torch.randn(1, 5, 12), torch.arange(5), pe, causal=True)


# ------------------------------------------------------------------- hooks directly
@pytest.mark.parametrize("name", ["rope", "xpos"])
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int8])
def test_rotary_encodings_refuse_integer_q_and_k(name, dtype):
    pe = build_encoding(name, n_heads=2, head_dim=8)
    x, pos = torch.randint(-5, 5, (1, 2, 3, 8), dtype=dtype), torch.arange(3)
    _raises(r"q must be a floating-point tensor \(batch, heads, length, head_dim\), got "
            rf"shape \(1, 2, 3, 8\), dtype {dtype}", pe.transform_qk, x, x, pos, pos)
    _raises(r"k must be a floating-point tensor", pe.transform_qk, x.float(), x, pos, pos)


def test_rope_checks_position_lengths_and_dtype():
    pe = build_encoding("rope", n_heads=2, head_dim=8)
    q, k = torch.randn(1, 2, 3, 8), torch.randn(1, 2, 4, 8)
    assert pe.transform_qk(q, k, torch.arange(1, 4), torch.arange(4))[0].shape == q.shape
    _raises(r"q_pos must have shape \(3,\), one position per token, got shape \(4,\)",
            pe.transform_qk, q, k, torch.arange(4), torch.arange(4))
    _raises(r"k_pos must have shape \(4,\)", pe.transform_qk, q, k, torch.arange(3),
            torch.arange(3))
    _raises(r"q_pos must be an integer tensor of positions, got dtype torch.float32",
            pe.transform_qk, q, k, torch.arange(3.0), torch.arange(4))


@pytest.mark.parametrize("q_heads", [4, 16])
@pytest.mark.parametrize("pe", ["alibi", "t5", "kerple"])
def test_a_per_head_bias_refuses_q_with_other_head_counts(pe, q_heads):
    enc = build_encoding(pe, n_heads=8, head_dim=8)
    pos = torch.arange(3)
    good = torch.randn(1, 8, 3, 8)
    assert enc.score_bias(good, good, pos, pos).shape == (1, 8, 3, 3)
    q = torch.randn(1, q_heads, 3, 8)
    _raises(rf"q has {q_heads} heads but this {pe} was built for n_heads=8", enc.score_bias,
            q, q, pos, pos)
    _raises(rf"q has {q_heads} heads", enc.score_mod, q, q, pos, pos)


def test_alibi_bias_checks_positions():
    enc = build_encoding("alibi", n_heads=2, head_dim=8)
    q = torch.randn(1, 2, 3, 8)
    _raises(r"k_pos must have shape \(3,\)", enc.score_bias, q, q, torch.arange(3),
            torch.arange(5))
    _raises(r"q_pos must be an integer tensor", enc.score_bias, q, q, torch.arange(3.0),
            torch.arange(3))


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
