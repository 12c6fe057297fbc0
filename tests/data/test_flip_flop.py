"""The flip-flop language (Liu et al. 2023): strings of write/ignore/read instructions with
bits, reads answering the last written bit, the paper's p_i, and scoring at the reads only."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from posenc.data.flip_flop import flip_flop, read_answers
from posenc.data.synthetic import IGNORE, make_task, min_length
from posenc.errors import UserError
from posenc.eval.tasks import score_predictions


def _ops(seqs: np.ndarray) -> np.ndarray:
    body = seqs[:, seqs.shape[1] % 2:]
    return body[:, 0::2]


def test_every_read_answers_the_last_written_bit():
    seqs, scored = flip_flop(np.random.default_rng(0), 64, 40, 0.5)
    expected = read_answers(seqs)
    for row, mask, answers in zip(seqs, scored, expected):
        assert [int(chr(b)) for b in row[mask]] == answers
        assert len(answers) >= 1


def test_strings_start_with_a_write_end_with_a_read_and_use_five_symbols():
    seqs, _ = flip_flop(np.random.default_rng(1), 32, 21, 0.8)      # odd: one '#' first
    assert (seqs[:, 0] == ord("#")).all()
    ops = _ops(seqs)
    assert (ops[:, 0] == ord("w")).all() and (ops[:, -1] == ord("r")).all()
    assert set(np.unique(seqs[:, 1:])) <= {ord(c) for c in "wir01"}


@pytest.mark.parametrize("p_ignore", [0.1, 0.8, 0.98])
def test_instructions_follow_the_papers_probabilities(p_ignore):
    seqs, _ = flip_flop(np.random.default_rng(2), 400, 512, p_ignore)
    inner = _ops(seqs)[:, 1:-1]                          # the first and last are fixed
    share = {c: float((inner == ord(c)).mean()) for c in "wir"}
    assert share["i"] == pytest.approx(p_ignore, abs=0.01)
    assert share["w"] == pytest.approx((1 - p_ignore) / 2, abs=0.01)
    assert share["r"] == pytest.approx((1 - p_ignore) / 2, abs=0.01)


def test_tasks_score_the_read_bits_only_and_are_reproducible():
    batch = make_task("flip_flop", 16, 30, seed=3)
    again = make_task("flip_flop", 16, 30, seed=3)
    assert torch.equal(batch.inputs, again.inputs) and torch.equal(batch.targets, again.targets)
    assert batch.inputs.shape == (16, 30)
    scored = batch.targets != IGNORE
    # the token before each scored target is its 'r' (inputs[t] predicts targets[t])
    assert (batch.inputs[scored] == ord("r")).all()
    assert set(batch.targets[scored].tolist()) <= {ord("0"), ord("1")}
    n_reads = sum(len(a) for a in read_answers(torch.cat(
        [batch.inputs, batch.targets[:, -1:].clamp(min=0)], dim=1).numpy()))
    assert int(scored.sum()) == n_reads                 # every read, the last one included
    sparse = make_task("flip_flop_sparse", 200, 255, seed=3)
    dense = make_task("flip_flop", 200, 255, seed=3)
    assert (sparse.targets != IGNORE).sum() < (dense.targets != IGNORE).sum() / 4
    assert min_length("flip_flop") == 3


def test_exact_match_needs_every_read_right():
    batch = make_task("flip_flop", 8, 40, seed=4)
    perfect = F.one_hot(batch.targets.clamp(min=0), 256).float()          # (N, T, V)
    right, total, exact = score_predictions(perfect, batch.targets)
    assert (right, exact) == (total, 8)
    reads = (batch.targets[0] != IGNORE).nonzero()[:, 0]
    wrong = perfect.clone()
    wrong[0, reads[-1]] = F.one_hot(batch.targets[0, reads[-1]] ^ 1, 256).float()  # 0 <-> 1
    right, total, exact = score_predictions(wrong, batch.targets)
    assert (right, exact) == (total - 1, 7)


def test_bad_sizes_are_refused():
    with pytest.raises(ValueError, match="at least 4 tokens"):
        flip_flop(np.random.default_rng(0), 1, 3, 0.8)
    with pytest.raises(ValueError, match="p_ignore"):
        flip_flop(np.random.default_rng(0), 1, 8, 1.0)
    with pytest.raises(UserError, match="length for task 'flip_flop'"):
        make_task("flip_flop", 1, 2, seed=0)
