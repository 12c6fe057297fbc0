"""Shared option checks: a positive float (argparse type) and a seed in torch's range."""

from __future__ import annotations

import argparse

import pytest
import torch

from posenc.cli.args import check_seed, positive_float
from posenc.encodings.checks import MAX_SEED, require_seed
from posenc.errors import UserError


@pytest.mark.parametrize("text,value", [("1", 1.0), ("0.5", 0.5), ("1e3", 1000.0)])
def test_positive_float_takes_positive_numbers(text, value):
    assert positive_float(text) == value


@pytest.mark.parametrize("text", ["-1", "0", "nan", "inf", "abc", ""])
def test_positive_float_refuses_the_rest(text):
    with pytest.raises(argparse.ArgumentTypeError):
        positive_float(text)


def test_positive_float_names_the_option_through_argparse(capsys):
    p = argparse.ArgumentParser(prog="x")
    p.add_argument("--memory-limit-gb", type=positive_float)
    with pytest.raises(SystemExit):
        p.parse_args(["--memory-limit-gb", "-1"])
    assert "argument --memory-limit-gb: must be a finite number > 0, got '-1'" in \
        capsys.readouterr().err


def test_the_largest_seed_is_one_torch_accepts():
    torch.Generator().manual_seed(MAX_SEED)
    with pytest.raises((RuntimeError, ValueError)):
        torch.Generator().manual_seed(MAX_SEED + 1)


@pytest.mark.parametrize("value", [None, 0, 7, MAX_SEED])
def test_seeds_in_range_pass(value):
    check_seed("--seed", value)


@pytest.mark.parametrize("value", [-1, MAX_SEED + 1, 99999999999999999999999])
def test_seeds_out_of_range_name_the_option(value):
    with pytest.raises(UserError, match=r"^--seed must be between 0 and 2\*\*64 - 1"):
        check_seed("--seed", value)


@pytest.mark.parametrize("value", [-1, MAX_SEED + 1, 2.0, True])
def test_the_library_refuses_the_seeds_the_commands_refuse_in_the_same_words(value):
    """One range and one check: the CLI's message is the library's with the option's
    command-line spelling."""
    from posenc.train import TrainConfig
    with pytest.raises(UserError) as lib:
        TrainConfig(seed=value)
    with pytest.raises(UserError) as cli:
        check_seed("--seed", value)
    with pytest.raises(UserError) as low:
        require_seed("seed", value)
    assert str(lib.value) == str(low.value) == str(cli.value).removeprefix("--")
    assert str(lib.value) == f"seed must be between 0 and 2**64 - 1 ({MAX_SEED}), got {value!r}"


def test_the_largest_seed_passes_everywhere():
    from posenc.train import TrainConfig
    assert TrainConfig(seed=MAX_SEED).seed == MAX_SEED
    check_seed("--seed", MAX_SEED)


@pytest.mark.parametrize("value", ["-1", "0"])
def test_extend_refuses_a_memory_limit_that_is_not_positive(value, capsys):
    from posenc.cli import main
    with pytest.raises(SystemExit) as exit_:
        main(["extend", "smollm2", "--memory-limit-gb", value])
    assert exit_.value.code == 2
    assert "argument --memory-limit-gb: must be a finite number > 0" in capsys.readouterr().err


@pytest.mark.parametrize("command", [["extend", "m"], ["arena"]])
def test_eval_windows_take_their_earlier_flag_spelling_too(command, capsys):
    """``--eval-windows`` (the name everywhere) and the hidden ``--windows`` of before."""
    from posenc.cli import build_parser
    parser = build_parser()
    assert parser.parse_args(command + ["--eval-windows", "3"]).eval_windows == 3
    assert parser.parse_args(command + ["--windows", "4"]).eval_windows == 4
    with pytest.raises(SystemExit):
        parser.parse_args(command + ["--help"])
    shown = capsys.readouterr().out
    assert "--eval-windows" in shown and "--windows" not in shown
