"""Each RULER family's generator on a byte-level tokenizer and a small text: the answers are
in the prompt as often as the task says, the prompt and its answer budget fit the length, and
a sample depends only on the seed, the family, the length and its index."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest

pytest.importorskip("transformers")

from posenc.errors import UserError  # noqa: E402
from posenc.hf.ruler import FAMILIES, RulerText, check_families, ruler_sample  # noqa: E402
from posenc.hf.ruler.word_counts import zipf_counts  # noqa: E402
from tests.hf.helpers import byte_bpe_tokenizer  # noqa: E402

LENGTHS = {"multikey": 1200, "multivalue": 1200, "multiquery": 1200, "vt": 1500,
           "cwe": 3000, "fwe": 1500}


@pytest.fixture(scope="module")
def tok():
    return byte_bpe_tokenizer()


@pytest.fixture(scope="module")
def text(tok):
    docs = [Path(json.__file__).read_text(), Path(random.__file__).read_text()]
    return RulerText.of(tok, docs)


def _prompt(tok, sample) -> str:
    return tok.decode(list(sample.ids))


@pytest.mark.parametrize("family", list(FAMILIES))
def test_a_sample_fits_its_length_and_depends_only_on_seed_family_length_index(tok, text,
                                                                              family):
    n = LENGTHS[family]
    a = ruler_sample(family, tok, text, n, 0, seed=3)
    assert 0.85 * n < len(a.ids) + a.max_new <= n
    assert ruler_sample(family, tok, text, n, 0, seed=3) == a
    assert ruler_sample(family, tok, text, n, 1, seed=3).ids != a.ids
    assert ruler_sample(family, tok, text, n, 0, seed=4).references != a.references
    assert a.max_new == {"vt": 30, "cwe": 120, "fwe": 50}.get(family, 128)   # RULER's budgets


@pytest.mark.parametrize("family,keys,values,asked", [("multikey", 4, 1, 1),
                                                      ("multivalue", 1, 4, 1),
                                                      ("multiquery", 4, 1, 4)])
def test_needles_hold_every_value_once_and_the_question_asks_the_keys(tok, text, family,
                                                                      keys, values, asked):
    sample = ruler_sample(family, tok, text, LENGTHS[family], 2)
    prompt = _prompt(tok, sample)
    needles = re.findall(r"One of the special magic numbers for (\S+) is: (\d{7})\.", prompt)
    assert len(needles) == keys * values
    assert len({k for k, _ in needles}) == keys
    assert len(sample.references) == asked * values
    for value in sample.references:
        assert prompt.count(value) == 1
    question = prompt[prompt.rindex("\nWhat "):]
    asked_keys = {k for k, v in needles if v in sample.references}
    assert len(asked_keys) == asked and all(k in question for k in asked_keys)
    one = asked * values == 1
    assert question.endswith("text is" if one else "text are")


def test_variable_tracking_hides_one_chain_of_five_after_a_solved_example(tok, text):
    sample = ruler_sample("vt", tok, text, LENGTHS["vt"], 0)
    prompt = _prompt(tok, sample)
    example, task = prompt.rsplit("Memorize and track", 1)
    names = sample.references
    assert len(names) == 5 and len(set(names)) == 5
    value = re.search(r"assigned the value (\d{5})", task).group(1)
    assert task.count(f"VAR {names[0]} = {value}\n") == 1
    for a, b in zip(names, names[1:]):
        assert task.count(f"VAR {b} = VAR {a}\n") == 1
    assert len(re.findall(r"^VAR ", task, re.M)) == 5 and task.count("The grass is green.") > 3
    solved = re.search(r"they are: ([A-Z ]+)\n", example).group(1).split()
    assert len(solved) == 5 and not set(solved) & set(names)


def _entries(listing: str) -> list[str]:
    return re.findall(r"\d+\. (\S+)", listing)


def test_common_words_repeat_six_times_and_the_rest_once_below_4096(tok, text):
    sample = ruler_sample("cwe", tok, text, LENGTHS["cwe"], 0)
    prompt = _prompt(tok, sample)
    task = prompt.rsplit("Below is a numbered list", 1)[1]
    entries = _entries(task.split("\nQuestion:")[0])
    counts = {w: entries.count(w) for w in set(entries)}
    assert len(sample.references) == 10
    assert all(counts[w] == 6 for w in sample.references)
    assert all(c == 1 for w, c in counts.items() if w not in sample.references)
    assert len(counts) > 10
    example = prompt.split("Below is a numbered list")[1]
    assert example.count("Answer: The top 10 words") == 1 and " 10. " in example


def test_frequent_words_follow_the_zipf_counts_and_the_answers_lead(tok, text):
    sample = ruler_sample("fwe", tok, text, LENGTHS["fwe"], 0)
    prompt = _prompt(tok, sample)
    body = prompt.split("coded words. ", 1)[1].split("\nQuestion:")[0].split()
    counts = {w: body.count(w) for w in set(body)}
    top = sorted((c, w) for w, c in counts.items() if w != "...")[::-1]
    assert tuple(w for _, w in top[:3]) == sample.references
    assert top[2][0] > top[3][0]
    draws = next(d for d in range(1, 10**5) if zipf_counts(d, 2)[1] == counts[top[0][1]])
    assert counts[sample.references[1]] in {zipf_counts(d, 3)[2] for d in range(draws,
                                                                                  draws + 8)}


@pytest.mark.parametrize("family", list(FAMILIES))
def test_a_length_too_short_for_the_task_is_refused_in_one_line(tok, text, family):
    with pytest.raises(UserError, match=f"RULER {family} needs more than"):
        ruler_sample(family, tok, text, 200, 0)


def test_unknown_or_repeated_families_are_refused_naming_the_valid_ones():
    with pytest.raises(UserError, match="valid tasks: multikey, multivalue"):
        check_families(("multikey", "qa"))
    with pytest.raises(UserError, match="repeated"):
        check_families(("vt", "vt"))


def test_the_word_list_is_the_texts_words_then_coded_words(text):
    rng = random.Random(0)
    few = text.distinct_words(rng, 5)
    assert set(few) <= set(text.words) and len(set(few)) == 5
    many = text.distinct_words(rng, len(text.words) + 20)
    assert len(set(many)) == len(many) and set(text.words) <= set(many)
