"""Task accuracy: only scored positions count, a tiny model at lengths past its table, and
greedy exact match of encoder-decoder tasks (the whole answer and the end token)."""

from __future__ import annotations

import pytest
import torch

from posenc.data.synthetic import BOS, EOS, make_seq2seq_task
from posenc.eval.tasks import seq2seq_accuracy_at_lengths
from posenc.models import LMConfig, TransformerLM
from posenc.models.seq2seq import Seq2SeqTransformer
from posenc.models.seq2seq_config import Seq2SeqConfig

pytestmark = pytest.mark.usefixtures("single_thread")


def tiny_seq2seq(pe: str = "learned", max_len: int = 6) -> Seq2SeqTransformer:
    return Seq2SeqTransformer(Seq2SeqConfig(
        d_model=32, n_heads=4, n_encoder_layers=1, n_decoder_layers=1, d_ff=64,
        max_len=max_len, encoder_pe=pe))


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


def test_task_scoring_counts_only_scored_positions():
    from posenc.eval.tasks import score_predictions
    targets = torch.tensor([[-100, 3, 4], [-100, -100, 2]])
    logits = torch.zeros(2, 3, 8)
    logits[0, 1, 3] = logits[0, 2, 5] = 1.0        # example 0: one of two right
    logits[1, 2, 2] = 1.0                          # example 1: its only scored token right
    logits[1, 0, 7] = 1.0                          # unscored positions do not count
    assert score_predictions(logits, targets) == (2, 3, 1)


def test_task_accuracy_at_lengths_on_a_tiny_model():
    from posenc.eval.tasks import task_accuracy_at_lengths
    torch.manual_seed(0)
    model = TransformerLM(LMConfig(vocab_size=256, d_model=32, n_layers=1, n_heads=2,
                                   max_len=16, pe="learned")).eval()
    results = task_accuracy_at_lengths(model, "copy", [16, 32], n_examples=4)
    assert results[0].n_examples == 4 and 0.0 <= results[0].token_accuracy <= 1.0
    assert results[1].token_accuracy is None and results[1].note.startswith("n/a")
    with pytest.raises(ValueError, match="unknown task"):
        task_accuracy_at_lengths(model, "sorting", [16])


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
