"""Perplexity: the hand computation, batched and sliding windows (every token scored
once, with its context), and the next token scored."""

import math

import pytest
import torch

from posenc.eval.perplexity import perplexity, windows
from tests.eval.helpers import stream, tiny


def test_perplexity_equals_hand_computation():
    model, tokens = tiny("rope"), stream(50)
    result = perplexity(lambda ids: model(ids), tokens, 16)
    nll = []
    for start in range(0, 50 - 16 + 1, 16):                  # 3 windows, 15 targets each
        window = tokens[start:start + 16]
        with torch.no_grad():
            logp = model(window[None])[0].log_softmax(-1)
        nll += [-float(logp[i, window[i + 1]]) for i in range(15)]
    assert result.n_windows == 3 and result.n_tokens == 45
    assert result.ppl == pytest.approx(math.exp(sum(nll) / len(nll)), rel=1e-5)


def test_batched_windows_give_the_same_perplexity():
    model, tokens = tiny("alibi"), stream(120)
    one = perplexity(lambda ids: model(ids), tokens, 16, stride=7, batch_size=1)
    many = perplexity(lambda ids: model(ids), tokens, 16, stride=7, batch_size=5)
    assert (one.n_tokens, one.n_windows) == (many.n_tokens, many.n_windows)
    assert one.nll == pytest.approx(many.nll, rel=1e-5)


def test_each_window_reports_its_own_mean_nll_batched_or_not():
    model, tokens = tiny("rope"), stream(60)
    per_window = {}
    for batch_size in (1, 3):
        seen = []
        result = perplexity(lambda ids: model(ids), tokens, 16, stride=8,
                            batch_size=batch_size, on_window=lambda nll, n: seen.append((nll, n)))
        per_window[batch_size] = seen
        weighted = sum(nll * n for nll, n in seen) / sum(n for _, n in seen)
        assert weighted == pytest.approx(result.nll, rel=1e-6)
    spans = list(windows(60, 16, stride=8))
    with torch.no_grad():                                  # each window by hand
        hand = []
        for start, end, n_scored in spans:
            logp = model(tokens[start:end][None])[0].log_softmax(-1)
            targets = tokens[end - n_scored:end]
            hand.append((-float(logp[-n_scored - 1:-1].gather(1, targets[:, None]).mean()),
                         n_scored))
    for seen in per_window.values():
        assert [n for _, n in seen] == [n for _, n in hand]
        assert [nll for nll, _ in seen] == pytest.approx([nll for nll, _ in hand], rel=1e-5)


def test_sliding_window_scores_each_token_once():
    tokens = stream(100)
    scored = []

    def logits_fn(ids):                       # records which stream positions were scored
        return torch.zeros(ids.shape[0], ids.shape[1], 32)

    spans = list(windows(100, 16, stride=6))
    for start, end, n_scored in spans:
        scored += range(end - n_scored, end)
    last_end = spans[-1][1]
    assert sorted(scored) == list(range(1, last_end))        # every token once, none twice
    result = perplexity(logits_fn, tokens, 16, stride=6)
    assert result.n_tokens == last_end - 1
    assert result.ppl == pytest.approx(32.0)                   # uniform logits: ppl = vocab


def test_sliding_window_gives_each_token_its_context():
    model, tokens = tiny("rope"), stream(40)
    result = perplexity(lambda ids: model(ids), tokens, 16, stride=6)
    nll = []
    with torch.no_grad():
        logp = model(tokens[:16][None])[0].log_softmax(-1)
        nll += [-float(logp[i, tokens[i + 1]]) for i in range(15)]
        for end in range(22, 41, 6):
            window = tokens[end - 16:end]
            logp = model(window[None])[0].log_softmax(-1)
            nll += [-float(logp[i, window[i + 1]]) for i in range(9, 15)]
    assert result.n_tokens == len(nll)
    assert result.nll == pytest.approx(sum(nll) / len(nll), rel=1e-5)


def test_stride_must_leave_context():
    with pytest.raises(ValueError, match="stride"):
        list(windows(100, 16, stride=16))


def test_perplexity_scores_the_next_token():
    # guards the perplexity helper against a silent off-by-one in its target slicing
    tokens = stream(40)
    logits = torch.zeros(1, 16, 32)
    logits[0, torch.arange(15), tokens[1:16]] = 100.0     # predicts every next token perfectly
    result = perplexity(lambda ids: logits.expand(ids.shape[0], -1, -1)
                        if torch.equal(ids[0], tokens[:16]) else torch.zeros(1, 16, 32),
                        tokens[:16], 16)
    assert result.ppl == pytest.approx(1.0)
