"""Synthetic tasks: the answers of copy, reverse, addition, passkey, recall and selective
copy, the encoder-decoder tasks, and their arguments."""

from __future__ import annotations

import pytest
import torch

from posenc.data.synthetic import IGNORE, SELECTIVE_LETTERS, TASKS, make_task, min_length


def text(row):
    return bytes(int(i) for i in row).decode("ascii")


def answer(batch, i):
    keep = batch.targets[i] != IGNORE
    return text(batch.targets[i][keep])


@pytest.mark.parametrize("length", [9, 40, 301])
def test_copy_reverse_addition_answers(length):
    for name in ("copy", "reverse", "addition"):
        b = make_task(name, 5, length, seed=3)
        assert b.inputs.shape == b.targets.shape == (5, length) and b.depths is None
        for i in range(5):
            full = text(b.inputs[i]) + text(b.targets[i][-1:])
            question, ans = full.lstrip("#").split("=")
            assert answer(b, i) == ans                      # exactly the answer is scored
            if name == "copy":
                assert ans == question and len(ans) == length // 2
            elif name == "reverse":
                assert ans == question[::-1]
            else:
                a, c = question.split("+")
                assert int(a) + int(c) == int(ans) and len(ans) == len(a) + 1
        torch.testing.assert_close(b.inputs, make_task(name, 5, length, seed=3).inputs)
        assert not torch.equal(b.inputs, make_task(name, 5, length, seed=4).inputs)


def test_passkey_hides_the_key_at_the_depth():
    for depth in (0.0, 0.5, 1.0):
        b = make_task("passkey", 3, 500, seed=0, depth=depth)
        for i in range(3):
            full = text(b.inputs[i]) + text(b.targets[i][-1:])
            key = answer(b, i)
            assert len(key) == 5 and key.isdigit()
            assert full.endswith("What is the pass key? The pass key is " + key)
            at = full.index(f"The pass key is {key}.")
            assert abs(at / 500 - depth * (500 - 100) / 500) < 0.05
        torch.testing.assert_close(b.depths, torch.full((3,), depth), atol=0.005, rtol=0)
    r = make_task("passkey", 20, 300, seed=1, key_digits=3)
    assert len(answer(r, 0)) == 3 and r.depths.std() > 0.1


def test_task_arguments_are_validated():
    with pytest.raises(ValueError, match="valid tasks: copy, reverse, addition, passkey, recall"):
        make_task("sort", 2, 10, 0)
    with pytest.raises(ValueError, match=r"length for task 'addition' must be an int >= 5"):
        make_task("addition", 2, 4, 0)
    with pytest.raises(ValueError, match=r"must be an int >= "):
        make_task("passkey", 2, min_length("passkey") - 1, 0)
    make_task("passkey", 1, min_length("passkey"), 0)
    with pytest.raises(ValueError, match="passkey task, not 'copy'"):
        make_task("copy", 2, 10, 0, depth=0.5)
    with pytest.raises(ValueError, match=r"depth must be in \[0, 1\]"):
        make_task("passkey", 2, 200, 0, depth=1.5)
    assert TASKS == ("copy", "reverse", "addition", "passkey", "recall", "selective_copy",
                     "flip_flop", "flip_flop_sparse")
    with pytest.raises(ValueError, match=r"length for task 'recall' must be an int >= 4"):
        make_task("recall", 2, 3, 0)


@pytest.mark.parametrize("length", [4, 9, 20, 130])
def test_recall_asks_for_the_value_of_a_listed_key(length):
    b = make_task("recall", 50, length, seed=5)
    assert b.inputs.shape == b.targets.shape == (50, length)
    n_pairs = (length - 2) // 2
    for i in range(50):
        full = text(b.inputs[i]) + answer(b, i)
        pairs, question = full.lstrip("#").split("=")
        assert len(pairs) == 2 * n_pairs and len(question) == 2 and answer(b, i).isdigit()
        mapping = {}
        for key, value in zip(pairs[::2], pairs[1::2]):
            assert key.islower() and value.isdigit()
            assert mapping.setdefault(key, value) == value     # a key keeps its value
        if n_pairs <= 26:
            assert len(mapping) == n_pairs                     # distinct keys while they last
        assert mapping[question[0]] == question[1]             # the scored token is its value
    where = {text(b.inputs[i]).lstrip("#").index(text(b.inputs[i])[-1]) for i in range(50)}
    assert len(where) > 1 or n_pairs == 1                      # any listed pair is asked


@pytest.mark.parametrize("name", ["reverse", "sort"])
def test_seq2seq_tasks_bracket_the_answer_with_bos_and_eos(name):
    from posenc.data.synthetic import BOS, EOS, make_seq2seq_task
    b = make_seq2seq_task(name, 6, 7, seed=2)
    assert b.src.shape == (6, 7) and b.tgt.shape == (6, 9) and b.length == 7
    assert (b.tgt[:, 0] == BOS).all() and (b.tgt[:, -1] == EOS).all()
    for src, tgt in zip(b.src, b.tgt):
        want = text(src)[::-1] if name == "reverse" else "".join(sorted(text(src)))
        assert text(tgt[1:-1]) == want
    torch.testing.assert_close(b.src, make_seq2seq_task(name, 6, 7, seed=2).src)
    assert not torch.equal(b.src, make_seq2seq_task(name, 6, 7, seed=3).src)
    with pytest.raises(ValueError, match="valid tasks: reverse, sort"):
        make_seq2seq_task("copy", 2, 4, 0)
    with pytest.raises(ValueError, match="length must be a positive int"):
        make_seq2seq_task(name, 2, 0, 0)


@pytest.mark.parametrize("length", [8, 16, 203])
def test_selective_copy_asks_for_the_letters_among_blanks_in_order(length):
    b = make_task("selective_copy", 50, length, seed=7)
    assert b.inputs.shape == b.targets.shape == (50, length)
    gaps = set()
    for i in range(50):
        full = text(b.inputs[i]) + text(b.targets[i][-1:])
        hidden, ans = full.split("=")
        letters = hidden.replace(".", "")
        assert answer(b, i) == ans == letters and len(ans) == SELECTIVE_LETTERS
        assert set(hidden) <= set(".abcdefghijklmnopqrstuvwxyz")
        assert len(hidden) == length - len(ans)
        gaps.add(hidden.index(letters[0]))
    assert len(gaps) > 1 or length == 8                  # the letters sit anywhere
    assert min_length("selective_copy") == 2 * SELECTIVE_LETTERS
