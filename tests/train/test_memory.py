"""Memory estimates: a training step or a generation that cannot fit is refused in one line
that names the option making it too large."""

from __future__ import annotations

import pytest
import torch

from posenc.errors import UserError
from posenc.models import LMConfig
from posenc.train.config import TrainConfig
from posenc.train.memory import (
    GIB,
    check_generation_memory,
    check_train_memory,
    generation_bytes,
    largest_cost,
    train_step_bytes,
)


def config(batch_size=16, train_len=128, **model):
    return TrainConfig(model=LMConfig(max_len=train_len, **model), batch_size=batch_size,
                       train_len=train_len)


@pytest.mark.parametrize("kwargs,blamed", [
    ({"d_model": 1_000_000_000, "n_heads": 1}, ["--d-model"]),
    ({"vocab_size": 10**12}, ["--vocab-size"]),
    ({"d_ff": 10**12}, ["--d-ff"]),
    ({"n_layers": 10**9}, ["--n-layers"]),
    ({"batch_size": 10**9}, ["--batch-size"]),
    ({"batch_size": 10**6, "train_len": 10**6}, ["--batch-size", "--train-len"]),
])
def test_the_option_that_costs_the_most_is_named(kwargs, blamed):
    cfg = config(**kwargs)
    assert largest_cost(cfg) == blamed
    with pytest.raises(UserError) as err:
        check_train_memory(cfg, "cpu", limit=GIB)
    message = str(err.value)
    assert message.endswith(f"lower {' or '.join(blamed)}") and "\n" not in message


def test_a_step_that_fits_returns_its_estimate():
    cfg = config()
    assert check_train_memory(cfg, "cpu", limit=10 * GIB) == train_step_bytes(cfg)


def test_generation_bytes_count_the_kv_cache():
    model = LMConfig(vocab_size=16, d_model=8, n_heads=2, n_layers=3)
    one = generation_bytes(model, 1, 1)
    assert generation_bytes(model, 1, 11) - one == 10 * 3 * (2 * 8 * 4 + 9)
    assert generation_bytes(model, 2, 11, torch.bfloat16) - generation_bytes(
        model, 2, 1, torch.bfloat16) == 2 * 10 * 3 * (2 * 8 * 2 + 9)


def test_a_generation_that_cannot_fit_names_the_option_and_what_fits():
    model = LMConfig(vocab_size=16, d_model=8, n_heads=2, n_layers=1)
    limit = generation_bytes(model, 1, 1000)
    assert check_generation_memory(model, 1, 10, 990, limit=limit) == limit
    with pytest.raises(UserError, match=r"^--max-new-tokens 1000000000000 needs a KV cache of "
                                        r"at least .* GiB are free on cpu; at most 990 new "
                                        r"tokens fit$"):
        check_generation_memory(model, 1, 10, 10**12, limit=limit)


def test_options_at_their_defaults_are_blamed_by_what_halving_saves():
    assert largest_cost(config()) == ["--d-model"]       # weights and activations shrink
    assert largest_cost(config(d_model=16, n_heads=2)) == ["--batch-size", "--train-len"]
