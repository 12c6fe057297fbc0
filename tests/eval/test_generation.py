"""Generating text: greedy text equals the model's own generate, pieces come out as the
tokens are chosen (a split character once, whole), sampling is reproducible with a seed,
generation ends at the end-of-document token, and bad input is refused before the model runs."""

from __future__ import annotations

import pytest
import torch

from posenc.data.tokenizer import BPETokenizer, ByteTokenizer, _train_bpe
from posenc.eval.generation import (
    check_new_tokens,
    encode_prompt,
    generate_text,
    new_token_limit,
    servable_length,
)
from tests.helpers import raises_one_line, tiny_lm_factory

pytestmark = pytest.mark.usefixtures("single_thread")

BYTES = ByteTokenizer()


def byte_lm(pe="rope", max_len=32):
    return tiny_lm_factory(pe, max_len=max_len, vocab_size=256, d_model=16, n_heads=2,
                           n_layers=1)


class ScriptedLM(torch.nn.Module):
    """Stands in for a TransformerLM whose next tokens are known: ``generate`` hands out
    ``script`` through ``on_token`` and records what was printed when."""

    def __init__(self, script, events):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(1))
        self.script, self.events = script, events

    def generate(self, ids, max_new_tokens, on_token=None, **_):
        out = ids
        for step, token in enumerate(self.script[:max_new_tokens]):
            self.events.append(("token", step))
            nxt = torch.tensor([[token]])
            out = torch.cat([out, nxt], dim=1)
            if on_token(step, nxt) is True:           # TransformerLM.generate's contract
                break
        return out


def test_greedy_text_is_the_models_generate_decoded():
    model = byte_lm()
    result = generate_text(model, BYTES, "the cat ", 20, stop_at_end=False)
    ids = model.generate(torch.tensor([BYTES.encode("the cat ")]), 20)[0].tolist()
    assert result.prompt_ids == ids[:8] and result.new_ids == ids[8:]
    assert result.text == BYTES.decode(ids[8:]) and not result.stopped_at_end


def test_text_streams_as_tokens_come_and_a_split_character_comes_once_whole():
    script = list("a".encode()) + list("🙂".encode()) + list("数b".encode())
    events = []
    result = generate_text(ScriptedLM(script, events), BYTES, "x", len(script),
                           on_text=lambda piece: events.append(("text", piece)))
    texts = [e for e in events if e[0] == "text"]
    assert texts == [("text", "a"), ("text", "🙂"), ("text", "数"), ("text", "b")]
    # each piece comes right after the token that completes it, before the next one
    order = [e[1] for e in events]
    assert order == [0, "a", 1, 2, 3, 4, "🙂", 5, 6, 7, "数", 8, "b"]
    assert result.text == "a🙂数b" and result.new_ids == script


def test_generation_stops_at_the_end_of_document_token_unless_told_not_to():
    script = list(b"ab") + [BYTES.sep_id] + list(b"cd")
    stopped = generate_text(ScriptedLM(script, []), BYTES, "x", 5)
    assert stopped.text == "ab" and stopped.new_ids == list(b"ab") and stopped.stopped_at_end
    kept = generate_text(ScriptedLM(script, []), BYTES, "x", 5, stop_at_end=False)
    assert kept.text == "ab\x00cd" and not kept.stopped_at_end


def test_a_partial_character_at_the_end_is_given_as_a_replacement():
    script = list("🙂".encode())[:2]
    pieces = []
    result = generate_text(ScriptedLM(script, []), BYTES, "x", 2, on_text=pieces.append)
    assert pieces == ["\ufffd"] and result.text == "\ufffd"


def test_seeded_sampling_is_reproducible():
    model = byte_lm()

    def sample(seed):
        return generate_text(model, BYTES, "the ", 24, temperature=1.0, top_p=0.95,
                             top_k=50, seed=seed, stop_at_end=False).new_ids

    assert sample(3) == sample(3)
    assert sample(3) != sample(4)


def test_servable_length_and_the_new_token_limit_follow_a_learned_table():
    learned, rope = byte_lm("learned", max_len=16), byte_lm("rope", max_len=16)
    assert [servable_length(learned, n) for n in (1, 15, 16, 17, 1000)] == [1, 15, 16, 16, 16]
    assert servable_length(rope, 1000) == 1000
    # 10 prompt tokens at positions 0..9, then new tokens fed at 10..15: 7 tokens chosen
    assert new_token_limit(learned, 10, 200) == 7 and new_token_limit(learned, 10, 5) == 5
    assert new_token_limit(learned, 16, 200) == 1 and new_token_limit(rope, 10, 200) == 200
    check_new_tokens(learned, 10, 7)
    raises_one_line("at most 7 new tokens fit", check_new_tokens, learned, 10, 8)
    raises_one_line("the prompt has 17 tokens, more than the 16 positions", check_new_tokens,
                    learned, 17, 1)
    result = generate_text(learned, BYTES, "0123456789", 7, stop_at_end=False)
    assert len(result.new_ids) == 7                     # the limit is the model's own


@pytest.fixture(scope="module")
def bpe():
    return BPETokenizer(_train_bpe(["the cat sat on the mat " * 20] * 5, 300), "bpe:300")


def test_prompts_that_cannot_be_encoded_are_refused(bpe):
    assert encode_prompt(BYTES, "café") == list("café".encode())
    raises_one_line("the prompt is empty", encode_prompt, BYTES, "")
    raises_one_line(r"not valid text, '\\udcff' at position 2", encode_prompt, BYTES,
                    "ab\udcff")
    raises_one_line(r"not valid text", encode_prompt, bpe, "\ud800")
    assert bpe.decode(encode_prompt(bpe, "the 🙂")) == "the 🙂"
    raises_one_line(r"cannot encode the prompt as it is: from position 4 \('<\|endoftext",
                    encode_prompt, bpe, "the <|endoftext|>")


@pytest.mark.parametrize("kwargs,message", [
    ({"temperature": -1.0}, "temperature must be"),
    ({"temperature": 1.0, "top_k": 0}, "top_k must be"),
    ({"temperature": 1.0, "top_p": 0.0}, "top_p must be"),
    ({"temperature": 0.0, "top_p": 2.0}, "top_p must be"),
    ({"seed": -1}, "seed must be"),
    ({"seed": 2**64}, r"seed must be between 0 and 2\*\*64 - 1"),
    ({"temperature": 1e-45, "top_p": 0.9}, r"temperature must be 0 \(greedy\) or at least"),
    ({"max_new_tokens": 0}, "max_new_tokens must be"),
])
def test_bad_arguments_are_refused_before_the_model_runs(kwargs, message):
    events = []
    args = {"max_new_tokens": 4, **kwargs}
    raises_one_line(message, generate_text, ScriptedLM([65] * 4, events), BYTES, "x", **args)
    assert events == []


def test_a_model_with_non_finite_weights_is_refused_before_it_runs():
    events = []
    model = ScriptedLM([65] * 4, events)
    with torch.no_grad():
        model.weight[0] = float("nan")
    raises_one_line("the model's weights are broken: weight holds non-finite values",
                    generate_text, model, BYTES, "x", 4, temperature=1.0, top_p=0.9)
    assert events == []
