"""Task training loops: teacher-forced encoder-decoder training, decoder-only task training,
and greedy-decoding exact match."""

from __future__ import annotations

import pytest
import torch

from posenc.data.synthetic import BOS, EOS, make_seq2seq_task
from posenc.eval.tasks import seq2seq_accuracy_at_lengths
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


def test_a_tiny_encoder_decoder_learns_to_reverse_four_letters():
    """300 teacher-forced steps of 32 examples: greedy decoding reverses held-out length-4
    inputs exactly far above chance (26**-4); the untrained model gets none right."""
    torch.manual_seed(0)
    model = tiny_seq2seq()
    cfg = TaskTrainConfig(steps=300, batch_size=32, min_len=4, max_len=4, lr=5e-3, seed=0)
    before = seq2seq_accuracy_at_lengths(model, "reverse", [4], n_examples=200, seed=99)[0]
    fitted = train_seq2seq(model, "reverse", cfg)
    after = seq2seq_accuracy_at_lengths(model, "reverse", [4], n_examples=200, seed=99)[0]
    assert len(fitted.losses) == 300 and fitted.losses[-1] < 0.5 * fitted.losses[0]
    assert before.exact_match == 0.0
    assert after.exact_match >= 0.5, after
    assert after.token_accuracy >= after.exact_match
    assert model.training                              # evaluation restores the mode


def test_training_is_a_function_of_the_config_and_seed():
    cfg = TaskTrainConfig(steps=5, batch_size=4, min_len=2, max_len=5, seed=3)
    runs = []
    for seed in (3, 3, 4):
        torch.manual_seed(0)
        model = tiny_seq2seq()
        runs.append(train_seq2seq(model, "sort", TaskTrainConfig(**{**cfg.to_dict(),
                                                                    "seed": seed,
                                                                    "betas": (0.9, 0.98)})))
    assert runs[0].losses == runs[1].losses
    assert runs[0].losses != runs[2].losses
    assert {cfg.length_at(s) for s in range(50)} == {2, 3, 4, 5}   # every length is drawn


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


class _Echo(torch.nn.Module):
    """A stand-in encoder-decoder whose greedy output is the target with the first
    ``wrong`` answer tokens replaced and EOS moved ``stop_early`` tokens earlier."""

    def __init__(self, task: str, wrong: int = 0, stop_early: int = 0) -> None:
        super().__init__()
        self.task, self.wrong, self.stop_early = task, wrong, stop_early
        self.weight = torch.nn.Parameter(torch.zeros(1))
        self.config = Seq2SeqConfig(d_model=8, n_heads=2)

    def generate(self, src, max_new_tokens, bos_id, eos_id):
        answer = src.flip(1) if self.task == "reverse" else src.sort(dim=1).values
        out = torch.cat([torch.full((src.shape[0], 1), bos_id), answer.clone(),
                         torch.full((src.shape[0], 1), eos_id)], dim=1)
        out[:, 1:1 + self.wrong] = ord("A")
        if self.stop_early:                            # EOS early, then filled with EOS
            out[:, -1 - self.stop_early:] = eos_id
            out = out[:, :out.shape[1] - self.stop_early + 1]
        assert out.shape[1] - 1 <= max_new_tokens and bos_id == BOS and eos_id == EOS
        return out


@pytest.mark.parametrize("task", ["reverse", "sort"])
def test_greedy_exact_match_needs_the_whole_answer_and_the_end_token(task):
    def score(**kw):
        return seq2seq_accuracy_at_lengths(_Echo(task, **kw), task, [5], n_examples=10)[0]
    assert (score().exact_match, score().token_accuracy) == (1.0, 1.0)
    one_wrong = score(wrong=1)
    assert one_wrong.exact_match == 0.0 and one_wrong.token_accuracy == pytest.approx(5 / 6)
    early = score(stop_early=2)                        # last two answer tokens are EOS
    assert early.exact_match == 0.0 and early.token_accuracy == pytest.approx(4 / 6)
    batch = make_seq2seq_task(task, 10, 5, seed=0)
    assert batch.tgt.shape == (10, 7)


def test_lengths_past_a_learned_table_are_noted_not_scored():
    model = tiny_seq2seq(max_len=6)
    res = seq2seq_accuracy_at_lengths(model, "reverse", [5, 6], n_examples=3)
    assert res[0].exact_match is not None and res[0].note is None
    assert res[1].exact_match is None and "past learned table" in res[1].note
