"""Argument checks: token ids against the vocabulary (eagerly on the CPU, skipped under
compile), positions of the wrong shape or dtype refused by every encoding."""

from __future__ import annotations

import pytest
import torch

from posenc import list_encodings
from posenc.encodings.checks import check_token_ids
from posenc.models.lm import LMConfig, TransformerLM
from posenc.models.seq2seq import Seq2SeqTransformer
from posenc.models.seq2seq_config import Seq2SeqConfig
from tests.helpers import context_options
from tests.helpers import raises_one_line as _raises

pytestmark = pytest.mark.usefixtures("single_thread")


VOCAB = 16


def _lm(pe: str = "rope") -> TransformerLM:
    return TransformerLM(LMConfig(vocab_size=VOCAB, d_model=16, n_heads=2, n_layers=1,
                                  max_len=32, pe=pe,
                                  pe_options=context_options(pe, VOCAB))).eval()


def _seq2seq() -> Seq2SeqTransformer:
    return Seq2SeqTransformer(Seq2SeqConfig(vocab_size=VOCAB, src_vocab_size=12,
                                            share_embeddings=False, d_model=16, n_heads=2,
                                            n_encoder_layers=1, n_decoder_layers=1,
                                            max_len=32)).eval()


BAD_POSITIONS = [
    (torch.arange(4), r"positions must have shape \(5,\) or \(2, 5\), one position per "
                      r"token, got shape \(4,\)"),
    (torch.arange(4).expand(2, 4), r"positions must have shape \(5,\) or \(2, 5\).*got "
                                   r"shape \(2, 4\)"),
    (torch.arange(5).expand(3, 5), r"positions must have shape \(5,\) or \(2, 5\).*got "
                                   r"shape \(3, 5\)"),
    (torch.arange(5).expand(1, 2, 5), r"got shape \(1, 2, 5\)"),
    (torch.arange(5.0), r"positions must be an integer tensor of positions, got dtype "
                        r"torch.float32"),
    ([0, 1, 2, 3, 4], r"positions must be an integer tensor of positions, got list"),
]


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


@pytest.mark.parametrize("pe", list_encodings())
def test_positions_of_the_wrong_shape_or_dtype_are_refused(pe):
    model, ids = _lm(pe), torch.randint(0, VOCAB, (2, 5))
    for pos, message in BAD_POSITIONS:
        _raises(message, model, ids, positions=pos)


def test_require_distinct_names_each_repeated_value_once():
    from posenc.encodings.checks import require_distinct
    require_distinct("depths", [0.0, 0.5, 1.0])
    require_distinct("seeds", [])
    _raises(r"^seeds lists 1, 3 more than once; give each once, got 1, 3, 1, 3, 1$",
            require_distinct, "seeds", [1, 3, 1, 3, 1])
