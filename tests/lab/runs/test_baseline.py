"""The unigram baseline and the rule that says whether a model learned."""

import math

import numpy as np
import pytest

from posenc.lab.runs.baseline import has_learned, unigram_ppl


def test_unigram_baseline_and_learned_rule():
    train = np.array([0, 0, 0, 1])
    ppl = unigram_ppl(train, np.array([0, 1]), vocab_size=2)    # p = 4/6 and 2/6
    assert ppl == pytest.approx(math.exp(-(math.log(4 / 6) + math.log(2 / 6)) / 2))
    assert has_learned(5.0, 10.0) and not has_learned(8.0, 10.0)
    assert has_learned(None, 10.0) is None and not has_learned(float("inf"), 10.0)
