"""Evaluation: perplexity against length, sliding windows, attention entropy, inference scaling."""

import math

import numpy as np
import pytest
import torch

from posenc.eval.entropy import attention_entropy, entropy_at_lengths, uniform_tail_entropy
from posenc.eval.inference_scaling import InferenceScaling, apply_inference_scaling
from posenc.eval.lengths import perplexity_at_lengths, unsupported_length
from posenc.eval.perplexity import perplexity, windows
from posenc.encodings import list_encodings
from posenc.models import LMConfig, TransformerLM
from tests.helpers import context_options


def tiny(pe: str, max_len: int = 16, seed: int = 0, **options) -> TransformerLM:
    torch.manual_seed(seed)
    config = LMConfig(vocab_size=32, d_model=32, n_layers=2, n_heads=4, max_len=max_len,
                      pe=pe, pe_options=options)
    return TransformerLM(config).eval()


def stream(n: int = 200, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, 32, (n,), generator=torch.Generator().manual_seed(seed))


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


def test_perplexity_at_lengths_limits_tokens_and_marks_learned_table():
    tokens = stream(400)
    results = perplexity_at_lengths(tiny("learned"), tokens, [32, 16], max_tokens=64)
    assert [r.length for r in results] == [16, 32]
    assert results[0].n_windows == 4 and results[0].ppl is not None
    assert results[1].ppl is None and results[1].value == "n/a (past learned table of 16)"
    assert unsupported_length(tiny("rope"), 10_000) is None


@pytest.mark.parametrize("pe", list_encodings())
def test_unsupported_length_is_exactly_what_the_model_refuses(pe):
    """Every encoding: n/a past max_len exactly when a forward there raises ValueError."""
    options = {"positions": "learned"} if pe == "multiplicative" else {}
    model = tiny(pe, max_len=8, **context_options(pe, vocab_size=32), **options)
    note = unsupported_length(model, 12)
    assert unsupported_length(model, 8) is None
    if note is None:
        with torch.no_grad():
            assert torch.isfinite(model(stream(12)[None])).all()
    else:
        with pytest.raises(ValueError):
            model(stream(12)[None])


def test_perplexity_at_lengths_reads_memory_mapped_arrays(tmp_path):
    tokens = stream(200)
    path = tmp_path / "tokens.npy"
    np.save(path, tokens.numpy().astype(np.uint16))
    mapped = np.load(path, mmap_mode="r")
    model = tiny("t5")
    a = perplexity_at_lengths(model, mapped, [16, 64], max_tokens=128)
    b = perplexity_at_lengths(model, tokens, [16, 64], max_tokens=128)
    assert [r.ppl for r in a] == pytest.approx([r.ppl for r in b], rel=1e-6)


def test_bad_lengths_raise():
    with pytest.raises(ValueError, match="longer than the held-out data"):
        perplexity_at_lengths(tiny("rope"), stream(50), [64])
    with pytest.raises(ValueError, match="integers >= 2"):
        perplexity_at_lengths(tiny("rope"), stream(50), [1])


def test_entropy_of_uniform_attention_is_log_n():
    n = 12
    weights = torch.tril(torch.ones(n, n))
    weights = weights / weights.sum(-1, keepdim=True)            # uniform over visible keys
    torch.testing.assert_close(attention_entropy(weights[None, None])[0, 0],
                               torch.log(torch.arange(1, n + 1, dtype=torch.float32)))
    one_hot = torch.eye(n)
    torch.testing.assert_close(attention_entropy(one_hot), torch.zeros(n))


def test_model_with_blind_queries_has_uniform_entropy():
    model = tiny("nope")
    with torch.no_grad():
        for block in model.blocks:                 # q = k = 0: every visible key weighs 1/n
            block.attn.qkv_proj.weight[:64] = 0
    results = entropy_at_lengths(model, stream(200), [16, 64], n_windows=2)
    for r in results:
        assert r.tail == pytest.approx(uniform_tail_entropy(r.length), rel=1e-5)
        assert r.mean == pytest.approx(
            float(np.mean(np.log(np.arange(1, r.length + 1)))), rel=1e-5)


def test_entropy_marks_learned_table():
    results = entropy_at_lengths(tiny("learned"), stream(100), [16, 32])
    assert results[0].mean is not None and results[1].note.startswith("n/a")


def test_inference_scaling_changes_rope_only_past_the_training_length():
    model, ids = tiny("rope"), stream(64)[None]
    with torch.no_grad():
        base = model(ids)
        for spec in ("yarn:4", "ntk:4", "linear:4", "dynamic", "logn"):
            scaled = apply_inference_scaling(model, InferenceScaling.parse(spec), 16)
            out = scaled(ids)
            assert not torch.allclose(out, base), spec
            if spec in ("dynamic", "logn"):    # both equal plain RoPE within the training length
                torch.testing.assert_close(scaled(ids[:, :16]), base[:, :16])
    assert model.config.pe_options == {}                      # the original is untouched


def test_inference_scaling_combines_and_round_trips():
    s = InferenceScaling.parse("yarn:4+logn")
    assert (s.rope_scaling, s.logn, s.label) == ("yarn:4", True, "yarn:4+logn")
    scaled = apply_inference_scaling(tiny("rope"), s, 16)
    assert scaled.config.pe_options["logn_base_len"] == 16
    assert scaled.config.pe_options["scaling"]["original_max_position_embeddings"] == 16
    with pytest.raises(ValueError, match="unknown scaling"):
        InferenceScaling.parse("warp:4")


def test_inference_scaling_refuses_non_rope():
    with pytest.raises(ValueError, match="needs a RoPE run.*'alibi'"):
        apply_inference_scaling(tiny("alibi"), InferenceScaling("yarn:4"), 16)
    trained_scaled = tiny("rope", scaling={"rope_type": "linear", "factor": 2.0})
    with pytest.raises(ValueError, match="trained with scaling"):
        apply_inference_scaling(trained_scaled, InferenceScaling("ntk:4"), 16)


def test_perplexity_scores_the_next_token():
    # guards the perplexity helper against a silent off-by-one in its target slicing
    tokens = stream(40)
    logits = torch.zeros(1, 16, 32)
    logits[0, torch.arange(15), tokens[1:16]] = 100.0     # predicts every next token perfectly
    result = perplexity(lambda ids: logits.expand(ids.shape[0], -1, -1)
                        if torch.equal(ids[0], tokens[:16]) else torch.zeros(1, 16, 32),
                        tokens[:16], 16)
    assert result.ppl == pytest.approx(1.0)


def test_refused_positions_become_notes_when_asked():
    model = tiny("hierarchical", n_positions=20)        # refuses in its forward, not before
    with pytest.raises(ValueError):
        perplexity_at_lengths(model, stream(100), [16, 32])
    results = perplexity_at_lengths(model, stream(100), [16, 32], errors="note")
    assert results[0].ppl is not None
    assert results[1].ppl is None and results[1].note.startswith("n/a (")
    ent = entropy_at_lengths(model, stream(100), [16, 32], errors="note")
    assert ent[0].tail is not None and ent[1].note.startswith("n/a (")


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
