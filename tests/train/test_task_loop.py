"""Decoder-only task training, and the arguments of task training checked."""

from __future__ import annotations

import pytest
import torch

from posenc.models import LMConfig, TransformerLM
from posenc.models.seq2seq import Seq2SeqTransformer
from posenc.models.seq2seq_config import Seq2SeqConfig
from posenc.train.seq2seq_loop import train_seq2seq
from posenc.train.task_loop import TaskTrainConfig, train_lm_task

pytestmark = pytest.mark.usefixtures("single_thread")


def tiny_seq2seq(pe: str = "learned", max_len: int = 6) -> Seq2SeqTransformer:
    return Seq2SeqTransformer(Seq2SeqConfig(
        d_model=32, n_heads=4, n_encoder_layers=1, n_decoder_layers=1, d_ff=64,
        max_len=max_len, encoder_pe=pe))


def test_lm_task_training_lowers_the_answer_loss():
    torch.manual_seed(0)
    model = TransformerLM(LMConfig(d_model=32, n_layers=1, n_heads=2, max_len=8, pe="alibi"))
    fitted = train_lm_task(model, "copy", TaskTrainConfig(steps=60, batch_size=16,
                                                          min_len=4, max_len=8, lr=1e-2))
    first, last = sum(fitted.losses[:5]) / 5, sum(fitted.losses[-5:]) / 5
    assert last < first - 1.0                          # from ~ln(256) towards ln(26)


def test_training_arguments_are_checked():
    model = tiny_seq2seq(max_len=6)
    with pytest.raises(ValueError, match="model max_len=6 is shorter"):
        train_seq2seq(model, "reverse", TaskTrainConfig(steps=1, min_len=2, max_len=8))
    with pytest.raises(ValueError, match="valid tasks: reverse, sort"):
        train_seq2seq(model, "copy", TaskTrainConfig(steps=1, min_len=2, max_len=4))
    lm = TransformerLM(LMConfig(d_model=16, n_layers=1, n_heads=2, max_len=8))
    with pytest.raises(ValueError, match="below task 'recall'"):
        train_lm_task(lm, "recall", TaskTrainConfig(steps=1, min_len=2, max_len=8))
    with pytest.raises(ValueError, match="min_len=5 must be <= max_len=4"):
        TaskTrainConfig(min_len=5, max_len=4)
    with pytest.raises(ValueError, match=r"betas\[1\]"):
        TaskTrainConfig(betas=(0.9, 1.0))
