"""``posenc generate``: the text of the model's own greedy generate on stdout and nothing
else, printed while it is generated, the same sample again with a seed, every bad input
refused in one line with exit 2 (a compare directory names the runs inside it)."""

from __future__ import annotations

import shutil

import pytest
import torch

from posenc.cli import main
from posenc.models.lm import TransformerLM
from posenc.train import load_run
from tests.helpers import make_corpus

pytestmark = pytest.mark.usefixtures("single_thread")

TRAIN_LEN = 16


def train_run(root, pe: str, d_model: int, batch_size: int, steps: int):
    """``posenc train`` of a one-layer byte-level run at TRAIN_LEN into ``root/run``."""
    code = main(["train", "--out", str(root / "run"), "--data",
                 str(make_corpus(root / "data", n=12)), "--cache-dir", str(root / "cache"),
                 "--pe", pe, "--train-len", str(TRAIN_LEN), "--d-model", str(d_model),
                 "--n-layers", "1", "--n-heads", "2", "--d-ff", str(2 * d_model),
                 "--batch-size", str(batch_size), "--steps", str(steps), "--no-progress",
                 "--device", "cpu"])
    assert code == 0
    return root / "run"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A byte-level run of a learned position table (16 positions), trained for 4 steps."""
    return train_run(tmp_path_factory.mktemp("generate"), "learned", 32, 4, 4)


def generate(capsys, run, *args):
    code = main(["generate", str(run), "--device", "cpu", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_greedy_prints_the_prompt_and_the_models_own_continuation(run_dir, capsys):
    code, out, err = generate(capsys, run_dir, "--prompt", "the cat", "--temperature", "0",
                              "--max-new-tokens", "8", "--ignore-end")
    assert code == 0 and err == ""
    loaded = load_run(run_dir)
    ids = loaded.model.generate(torch.tensor([loaded.tokenizer.encode("the cat")]), 8)
    assert out == loaded.tokenizer.decode(ids[0].tolist()) + "\n"
    assert out.startswith("the cat")


def test_text_is_written_and_flushed_while_tokens_are_chosen(run_dir, capsys, monkeypatch):
    events = []
    original = TransformerLM.generate

    def recorded(self, ids, max_new_tokens, *args, on_token=None, **kwargs):
        def on(step, tokens):
            events.append(("token", step))
            on_token(step, tokens)
        return original(self, ids, max_new_tokens, *args, on_token=on, **kwargs)

    class Stdout:
        def write(self, text):
            events.append(("write", text))

        def flush(self):
            events.append(("flush",))

    monkeypatch.setattr(TransformerLM, "generate", recorded)
    monkeypatch.setattr("sys.stdout", Stdout())
    code = main(["generate", str(run_dir), "--prompt", "the", "--temperature", "0",
                 "--max-new-tokens", "10", "--ignore-end", "--device", "cpu"])
    assert code == 0
    kinds = [e[0] for e in events]
    assert kinds[:2] == ["write", "flush"] and events[0] == ("write", "the")  # prompt first
    assert kinds.count("token") == 10
    writes = [i for i, k in enumerate(kinds) if k == "write"]
    tokens = [i for i, k in enumerate(kinds) if k == "token"]
    assert any(tokens[0] < w < tokens[-1] for w in writes)      # text before the last token
    assert all(kinds[w + 1] == "flush" for w in writes)         # each piece flushed at once
    assert events[writes[-1]] == ("write", "\n")


def test_seeded_sampling_is_reproducible_and_a_fresh_seed_is_reported(run_dir, capsys):
    sample = ["--prompt", "the ", "--max-new-tokens", "12", "--temperature", "1.0",
              "--ignore-end"]
    first = generate(capsys, run_dir, *sample, "--seed", "7")
    again = generate(capsys, run_dir, *sample, "--seed", "7")
    assert first == again and first[0] == 0 and first[2] == ""
    code, out, err = generate(capsys, run_dir, *sample)
    assert code == 0 and err.startswith("posenc generate: seed ")
    seed = err.split()[3]
    assert generate(capsys, run_dir, *sample, "--seed", seed)[1] == out


def test_the_default_length_stops_where_the_learned_table_ends(run_dir, capsys):
    code, out, err = generate(capsys, run_dir, "--prompt", "0123456789", "--temperature", "0",
                              "--ignore-end")
    assert code == 0 and "generating 7 tokens: the learned position table" in err
    assert len(out.encode()) <= 10 + 7 + 1                     # a byte-level run


@pytest.fixture(scope="module")
def compare_dir(run_dir, tmp_path_factory):
    """``run_dir`` laid out as a `posenc compare` output: OUT/runs/learned/seed0."""
    out = tmp_path_factory.mktemp("compare") / "out"
    shutil.copytree(run_dir, out / "runs" / "learned" / "seed0")
    return out


def test_a_run_inside_a_compare_directory_generates(compare_dir, capsys):
    code, out, _ = generate(capsys, compare_dir / "runs" / "learned" / "seed0", "--prompt",
                            "the", "--temperature", "0", "--max-new-tokens", "3")
    assert code == 0 and out.startswith("the")


@pytest.mark.parametrize("case,args,message", [
    ("missing", ["--prompt", "a"], "does not exist"),
    ("not_a_run", ["--prompt", "a"], "holds no run (no config.json); give a directory"),
    ("compare", ["--prompt", "a"], "/out/runs/learned/seed0"),
    ("encoding", ["--prompt", "a"], "/out/runs/learned/seed0"),
    ("run", ["--prompt", ""], "--prompt is empty"),
    ("run", ["--prompt", "ab\udcff"], "not valid text, '\\udcff' at position 2"),
    ("run", ["--prompt", "the", "--max-new-tokens", "20"],
     "a prompt of 3 tokens plus 20 new tokens needs 22 positions, but this run's encoding "
     "'learned' serves 16; at most 14 new tokens fit"),
    ("run", ["--prompt", "x" * 17], "the prompt has 17 tokens, more than the 16 positions"),
    ("run", ["--prompt", "a", "--max-new-tokens", "0"], "--max-new-tokens must be >= 1"),
    ("run", ["--prompt", "a", "--top-p", "0"], "top_p must be a number in (0.0, 1.0]"),
    ("run", ["--prompt", "a", "--top-p", "1.5"], "top_p must be a number in (0.0, 1.0]"),
    ("run", ["--prompt", "a", "--top-k", "0"], "top_k must be a positive int"),
    ("run", ["--prompt", "a", "--temperature", "-1"], "temperature must be a number"),
    ("run", ["--prompt", "a", "--temperature", "nan"], "temperature must be a number"),
    ("run", ["--prompt", "a", "--seed", "-3"], "--seed must be between 0 and 2**64 - 1"),
    ("run", ["--prompt", "a", "--seed", "99999999999999999999999"],
     "--seed must be between 0 and 2**64 - 1"),
    ("run", ["--prompt", "a", "--temperature", "1e-45"], "temperature must be 0 (greedy)"),
    ("run", ["--prompt", "a", "--device", "cuda:7"], "--device 'cuda:7' was asked for"),
])
def test_bad_input_is_one_line_exit_2(run_dir, compare_dir, tmp_path, capsys, case, args,
                                      message):
    (tmp_path / "notes.txt").write_text("not a run")
    where = {"missing": tmp_path / "nowhere", "not_a_run": tmp_path, "compare": compare_dir,
             "encoding": compare_dir / "runs" / "learned", "run": run_dir}[case]
    code, out, err = generate(capsys, where, *args)
    assert code == 2 and out == ""
    assert err.startswith("posenc generate: error: ") and err.count("\n") == 1, err
    assert message in err, err


def test_a_generation_too_large_for_the_memory_names_the_option(tmp_path, capsys):
    """A RoPE run serves any length: --max-new-tokens 10**12 is bounded by the memory its KV
    cache needs, not by a 100 TB allocation."""
    train_run(tmp_path, "rope", 16, 2, 1)
    capsys.readouterr()
    code, out, err = generate(capsys, tmp_path / "run", "--prompt", "a",
                              "--max-new-tokens", "1000000000000")
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert "--max-new-tokens 1000000000000 needs a KV cache of at least" in err
    assert "new tokens fit" in err
