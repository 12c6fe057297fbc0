"""Choosing the next token: sampling arguments checked, reproducible with a generator,
top-k and top-p (nucleus) filters keep exactly what they should."""

from __future__ import annotations

import pytest
import torch

from posenc import LMConfig, TransformerLM
from posenc.models.generate import (
    checks_each_token,
    logits_broken,
    select_next,
    top_k_filter,
    top_p_filter,
)
from tests.helpers import raises_one_line as _raises

pytestmark = pytest.mark.usefixtures("single_thread")

VOCAB = 16


def _learned_model(max_len=8):
    return TransformerLM(LMConfig(vocab_size=16, d_model=16, n_heads=2, n_layers=1,
                                  max_len=max_len, pe="learned")).eval()


@pytest.mark.parametrize("kwargs,message", [
    ({"temperature": "1"}, "temperature must be a number"),
    ({"temperature": float("nan")}, "temperature must be a number"),
    ({"temperature": 1.0, "top_k": True}, "top_k must be a positive int"),
])
def test_sampling_arguments_are_checked(kwargs, message):
    _raises(message, select_next, torch.randn(1, VOCAB), **kwargs)


@pytest.mark.parametrize("kwargs,message", [
    ({"max_new_tokens": -1}, "max_new_tokens"),
    ({"max_new_tokens": 2, "temperature": -0.5}, "temperature"),
    ({"max_new_tokens": 2, "temperature": 1.0, "top_k": 0}, "top_k"),
])
def test_bad_generation_arguments(kwargs, message):
    model = _learned_model()
    with pytest.raises(ValueError, match=message):
        model.generate(torch.zeros(1, 2, dtype=torch.long), **kwargs)


@torch.no_grad()
def test_sampling_is_reproducible_and_respects_top_k(tiny_lm):
    model = tiny_lm("rope")
    prompt = torch.randint(0, 48, (1, 4))
    runs = [model.generate(prompt, 8, temperature=1.0, top_k=3,
                           generator=torch.Generator().manual_seed(5)) for _ in range(2)]
    assert torch.equal(runs[0], runs[1])
    ids = runs[0]
    logits = model(ids[:, :-1])[0, 3:]                      # logits that chose tokens 4..11
    top3 = logits.topk(3, dim=-1).indices
    assert all(int(t) in top3[i].tolist() for i, t in enumerate(ids[0, 4:]))


# ------------------------------------------------------------------ top-p (nucleus)
def _logits(*probs):
    """Logits (len(probs), V) whose softmax is each row of ``probs``."""
    return torch.tensor(probs, dtype=torch.float32).log()


def _kept(filtered):
    return [torch.isfinite(row).nonzero().flatten().tolist() for row in filtered]


@pytest.mark.parametrize("top_p,kept", [
    (0.05, [2]),                  # the most probable token alone reaches any p <= its mass
    (0.49, [2]),
    (0.51, [2, 0]),               # 0.5 falls short of 0.51: the next one is needed
    (0.79, [2, 0]),
    (0.81, [2, 0, 3]),
    (0.95, [2, 0, 3]),
    (0.96, [2, 0, 3, 1]),
    (1.0, [2, 0, 3, 1, 4]),
])
def test_top_p_keeps_exactly_the_nucleus(top_p, kept):
    logits = _logits([0.3, 0.04, 0.5, 0.15, 0.01])
    filtered = top_p_filter(logits, top_p)
    assert _kept(filtered) == [sorted(kept)]
    assert torch.equal(filtered[torch.isfinite(filtered)], logits[torch.isfinite(filtered)])


def test_top_p_keeps_ties_together_and_filters_rows_independently():
    logits = _logits([0.1, 0.4, 0.1, 0.4],       # p=0.5: both 0.4s, whatever their order
                     [0.2, 0.2, 0.2, 0.4],       # p=0.5: 0.4 and all three tied 0.2s
                     [0.97, 0.01, 0.01, 0.01])   # p=0.5: the 0.97 alone
    assert _kept(top_p_filter(logits, 0.5)) == [[1, 3], [0, 1, 2, 3], [0]]
    for row in range(3):                         # one row alone gives the same nucleus
        assert torch.equal(top_p_filter(logits[row:row + 1], 0.5),
                           top_p_filter(logits, 0.5)[row:row + 1])


def test_top_p_sampling_draws_only_from_the_nucleus_in_proportion():
    logits = _logits([0.3, 0.04, 0.5, 0.15, 0.01]).expand(4000, 5)
    draws = select_next(logits, 1.0, generator=torch.Generator().manual_seed(0), top_p=0.8)
    counts = torch.bincount(draws.flatten(), minlength=5)
    assert counts[[1, 3, 4]].sum() == 0
    assert abs(counts[2] / 4000 - 0.5 / 0.8) < 0.03            # renormalised: 5/8 and 3/8


def test_top_p_one_is_plain_sampling_and_a_tiny_top_p_is_greedy():
    logits = torch.randn(6, VOCAB) * 2
    plain = select_next(logits, 0.7, generator=torch.Generator().manual_seed(3))
    full = select_next(logits, 0.7, generator=torch.Generator().manual_seed(3), top_p=1.0)
    assert torch.equal(plain, full)
    tiny = select_next(logits, 0.7, generator=torch.Generator().manual_seed(3), top_p=1e-6)
    assert torch.equal(tiny, logits.argmax(-1, keepdim=True))


def test_top_p_applies_after_temperature_and_top_k():
    logits = _logits([0.45, 0.35, 0.2])
    assert _kept(top_p_filter(logits / 0.01, 0.9)) == [[0]]      # cold: 0.45 takes all
    assert _kept(top_p_filter(logits / 100.0, 0.5)) == [[0, 1]]  # hot: nearly uniform
    # top-k leaves [0.45, 0.35] -> renormalised 0.5625 reaches 0.5 alone
    assert _kept(top_p_filter(top_k_filter(logits, 2), 0.5)) == [[0]]
    gen = torch.Generator().manual_seed(0)
    draws = select_next(logits.expand(500, 3), 1.0, 2, gen, top_p=0.5)
    assert draws.unique().tolist() == [0]


def test_greedy_ignores_top_k_and_top_p():
    logits = torch.randn(4, VOCAB)
    assert torch.equal(select_next(logits, 0.0, 3, top_p=0.2),
                       logits.argmax(-1, keepdim=True))


def test_top_p_sampling_is_reproducible_with_a_generator(tiny_lm):
    model = tiny_lm("rope")
    prompt = torch.randint(0, 48, (2, 4))
    runs = [model.generate(prompt, 8, temperature=1.0, top_p=0.9,
                           generator=torch.Generator().manual_seed(5)) for _ in range(2)]
    assert torch.equal(runs[0], runs[1])


@pytest.mark.parametrize("top_p", [0, 0.0, -0.1, 1.01, float("nan"), float("inf"), True, "0.9"])
def test_bad_top_p_is_refused(top_p):
    _raises("top_p must be a number in", select_next, torch.randn(1, VOCAB), 1.0, top_p=top_p)
    _raises("top_p must be a number in", select_next, torch.randn(1, VOCAB), 0.0, top_p=top_p)


def test_bad_top_p_is_refused_by_generate():
    with pytest.raises(ValueError, match="top_p"):
        _learned_model().generate(torch.zeros(1, 2, dtype=torch.long), 2, temperature=1.0,
                                  top_p=1.5)


def test_on_token_sees_each_token_and_stops_generation_when_it_returns_true():
    from posenc import LMConfig, TransformerLM
    model = TransformerLM(LMConfig(vocab_size=16, d_model=16, n_heads=2, n_layers=1)).eval()
    prompt = torch.tensor([[1, 2, 3]])
    full = model.generate(prompt, 6)
    seen = []
    assert torch.equal(model.generate(prompt, 6, on_token=lambda s, t: seen.append(t)), full)
    assert torch.equal(torch.cat(seen, dim=1), full[:, 3:])
    stopped = model.generate(prompt, 6, on_token=lambda step, t: step == 2)
    assert torch.equal(stopped, full[:, :6])                   # ends with the third new token


@pytest.mark.parametrize("kwargs", [{"temperature": 1e-45, "top_p": 0.9},
                                    {"temperature": 1e-45}, {"temperature": 5e-5}])
def test_a_temperature_too_small_to_divide_by_is_refused(kwargs):
    _raises(r"temperature must be 0 \(greedy\) or at least 0.0001, got", select_next,
            torch.randn(2, VOCAB), **kwargs)


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
@pytest.mark.parametrize("kwargs", [{"temperature": 0.0}, {"temperature": 1.0},
                                    {"temperature": 1.0, "top_p": 0.9}])
def test_non_finite_logits_say_the_model_is_broken(bad, kwargs):
    logits = torch.randn(2, VOCAB)
    logits[1, 3] = bad
    _raises("the model's logits are not finite", select_next, logits, **kwargs)


def test_a_row_of_minus_infinity_has_nothing_to_pick():
    logits = torch.randn(2, VOCAB)
    logits[0] = float("-inf")
    _raises("not finite", select_next, logits, temperature=1.0)
    logits[0] = torch.randn(VOCAB)
    logits[0, :5] = float("-inf")                      # masked tokens alone are fine
    assert select_next(logits, temperature=1.0).shape == (2, 1)


def test_generate_with_non_finite_weights_is_one_line():
    model = _learned_model()
    with torch.no_grad():
        model.head.weight[0, 0] = float("nan")
    _raises("the model's logits are not finite", model.generate,
            torch.zeros(1, 2, dtype=torch.long), 3, temperature=1.0, top_p=0.9)


@pytest.mark.parametrize("device,streaming,each", [
    ("cpu", False, True), ("cpu", True, True), ("cuda", False, False), ("cuda:1", True, True),
    ("mps", False, False)])
def test_logits_are_checked_per_token_only_where_a_read_is_free(device, streaming, each):
    assert checks_each_token(torch.device(device), streaming) is each


def _gathered(monkeypatch):
    """Decoding loops check their logits once, after the loop, as on an accelerator."""
    import posenc.models.lm as lm
    monkeypatch.setattr(lm, "checks_each_token", lambda device, streaming: False)


@pytest.mark.parametrize("kwargs", [{"temperature": 0.0}, {"temperature": 1.0, "top_p": 0.9}])
def test_a_check_gathered_on_the_device_still_refuses_broken_logits(monkeypatch, kwargs):
    model = _learned_model()
    with torch.no_grad():
        model.head.weight[0, 0] = float("nan")
    _gathered(monkeypatch)
    _raises("the model's logits are not finite", model.generate,
            torch.zeros(1, 2, dtype=torch.long), 3, **kwargs)


def test_a_check_gathered_on_the_device_picks_the_same_tokens(monkeypatch):
    model, prompt = _learned_model(), torch.tensor([[1, 2, 3]])
    each = model.generate(prompt, 4, temperature=1.0,
                          generator=torch.Generator().manual_seed(0), top_k=5)
    _gathered(monkeypatch)
    once = model.generate(prompt, 4, temperature=1.0,
                          generator=torch.Generator().manual_seed(0), top_k=5)
    assert torch.equal(each, once)


def test_without_the_check_a_broken_row_still_samples():
    logits = torch.randn(2, VOCAB)
    logits[0, 2] = float("nan")
    picked = select_next(logits, 1.0, generator=torch.Generator().manual_seed(0), check=False)
    assert picked.shape == (2, 1) and bool(logits_broken(logits))
    assert not bool(logits_broken(torch.randn(2, VOCAB)))
