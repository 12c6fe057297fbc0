"""``posenc demo-generate`` runs through every registered encoding: tokens sampled with the
KV cache equal those sampled recomputing everything, the tokens vary (so the comparison
checks something), a failing or differing encoding makes the exit status 1, and --tokens is
bounded by the demo models' length."""

from __future__ import annotations

import pytest
import torch

from posenc import list_encodings
from posenc.cli import cmd_demo_generate, main

pytestmark = pytest.mark.usefixtures("single_thread")


def tokens_of(line: str) -> list[int]:
    return [int(t) for t in line.split("tokens: [")[1].rstrip("]").split(", ")]


def test_demo_generate_runs_every_encoding_and_its_tokens_vary(capsys):
    assert main(["demo-generate", "--tokens", "6"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert [line.split()[0] for line in lines] == list_encodings()
    assert all("cached vs full recompute: same" in line for line in lines)
    for line in lines:
        assert len(set(tokens_of(line))) > 1, line        # not one token repeated


def test_a_differing_encoding_makes_the_exit_status_1(capsys, monkeypatch):
    real = cmd_demo_generate.sample_both_ways

    def off_by_one(model, prompt, n, seed):
        cached, full = real(model, prompt, n, seed)
        if model.config.pe == "rope":
            full = full.clone()
            full[0, -1] = (full[0, -1] + 1) % 256
        return cached, full

    monkeypatch.setattr(cmd_demo_generate, "sample_both_ways", off_by_one)
    monkeypatch.setattr(cmd_demo_generate, "list_encodings", lambda: ["alibi", "rope"])
    assert main(["demo-generate", "--tokens", "2"]) == 1
    captured = capsys.readouterr()
    assert "rope           cached vs full recompute: DIFFERENT" in captured.out
    assert captured.err == ("posenc demo-generate: 1 of 2 encodings failed or differed: "
                            "rope\n")


def test_a_failing_encoding_makes_the_exit_status_1(capsys, monkeypatch):
    def fails(*_):
        raise RuntimeError("no kernel for this dtype\nmore detail")

    monkeypatch.setattr(cmd_demo_generate, "sample_both_ways", fails)
    monkeypatch.setattr(cmd_demo_generate, "list_encodings", lambda: ["alibi"])
    assert main(["demo-generate", "--tokens", "2"]) == 1
    captured = capsys.readouterr()
    assert captured.out == "alibi          fails in float32 on cpu: no kernel for this dtype\n"
    assert "1 of 1 encodings failed" in captured.err


@pytest.mark.parametrize("args,message", [
    (["--tokens", "100000000"], "--tokens must be between 1 and 55, got 100000000: the demo "
                                "models serve 64 positions and the prompt takes 10"),
    (["--tokens", "0"], "--tokens must be between 1 and 55"),
    (["--seed", "99999999999999999999999"], "--seed must be between 0 and 2**64 - 1"),
    (["--device", "nowhere"], "--device 'nowhere' is not a device"),
])
def test_bad_options_are_one_line_before_any_model_runs(capsys, monkeypatch, args, message):
    monkeypatch.setattr(cmd_demo_generate, "sample_both_ways", None)   # never reached
    assert main(["demo-generate", *args]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert message in captured.err


def test_the_longest_demo_fits_every_encoding():
    model = cmd_demo_generate.TransformerLM(cmd_demo_generate.LMConfig(
        pe="learned", max_len=cmd_demo_generate.DEMO_MAX_LEN, d_model=16, n_heads=2)).eval()
    prompt = torch.tensor([list(cmd_demo_generate.PROMPT)])
    cached, full = cmd_demo_generate.sample_both_ways(
        model, prompt, cmd_demo_generate.MAX_TOKENS, 0)
    assert torch.equal(cached, full)
