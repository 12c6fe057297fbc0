"""A run stopped mid-way and resumed has the loss curve and weights of an uninterrupted
run; changed or corrupt checkpoint files are a clear error."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap

import pytest
import torch

from posenc.cli import main
from posenc.models import LMConfig
from posenc.train import TrainConfig, load_run, train
from posenc.train.checkpoint import committed_file, read_progress
from tests.helpers import make_corpus

STEPS = 8


class Killed(Exception):
    pass


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    folder = tmp_path_factory.mktemp("text")
    for i in range(30):
        (folder / f"{i:02d}.txt").write_text("".join(f"line {j} of file {i}: x = {i * j}\n"
                                                     for j in range(30)))
    return folder


def config(data, cache, **kw):
    model = LMConfig(d_model=32, n_layers=1, n_heads=2, max_len=16, d_ff=64, pe="t5",
                     dropout=0.1)                      # dropout: the RNG state must resume too
    return TrainConfig(model=model, data=str(data), train_len=16, batch_size=4, steps=STEPS,
                       checkpoint_every=3, eval_every=2, eval_windows=4, cache_dir=str(cache),
                       device="cpu", **kw)


def curve(run_dir):
    return [json.dumps(r, sort_keys=True) for r in
            ({k: v for k, v in r.items() if k in ("step", "loss", "lr", "grad_norm",
                                                   "val_loss")}
             for r in load_run(run_dir).log)]


@pytest.fixture(scope="module")
def straight(data, tmp_path_factory):
    root = tmp_path_factory.mktemp("straight")
    cfg = config(data, root / "cache")
    train(cfg, root / "run", progress=False)
    return root / "run"


def assert_same_run(a, b, exact=True):
    """Same log and weights: bit for bit within one process; across processes float sums
    may round differently in the last bit (a reduction's order can depend on alignment)."""
    if exact:
        assert curve(a) == curve(b)
    else:
        ca, cb = (json.loads(f"[{','.join(curve(r))}]") for r in (a, b))
        assert [sorted(r) for r in ca] == [sorted(r) for r in cb]
        for ra, rb in zip(ca, cb):
            assert ra == pytest.approx(rb, rel=1e-6, abs=1e-7), (ra, rb)
    tol = {"rtol": 0, "atol": 0} if exact else {"rtol": 1e-5, "atol": 1e-6}
    wa, wb = load_run(a).model.state_dict(), load_run(b).model.state_dict()
    for name in wa:
        torch.testing.assert_close(wa[name], wb[name], **tol)


def cli_args(tmp_path, out, *extra):
    return ["train", "--out", str(out), "--d-model", "32", "--n-layers", "1", "--n-heads",
            "2", "--d-ff", "64", "--train-len", "16", "--batch-size", "4", "--steps", "4",
            "--cache-dir", str(tmp_path / "cache"), "--device", "cpu", "--no-progress", *extra]


def one_line_error(capsys, match):
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("posenc train: error: "), err
    assert match in err, err
    assert "Traceback" not in err


@pytest.mark.parametrize("stop_at", [5, 6])
def test_resume_after_an_exception_equals_the_uninterrupted_run(data, straight, tmp_path,
                                                                stop_at):
    cfg = config(data, tmp_path / "cache")

    def stop(step, record, model):
        if step == stop_at:
            raise Killed

    with pytest.raises(Killed):
        train(cfg, tmp_path / "run", progress=False, on_step=stop)
    assert read_progress(tmp_path / "run")["step"] == 6 if stop_at == 6 else 3
    logged = [r["step"] for r in load_run(tmp_path / "run").log if "loss" in r]
    assert logged[-1] == stop_at                       # steps past the checkpoint were logged
    result = train(cfg, tmp_path / "run", progress=False)
    assert result.steps == STEPS
    assert_same_run(straight, tmp_path / "run")


def test_resume_after_sigkill_of_a_real_process(data, straight, tmp_path):
    cfg = config(data, tmp_path / "cache")
    script = textwrap.dedent(f"""
        import json, os, signal
        from posenc.train import TrainConfig, train
        cfg = TrainConfig.from_dict(json.loads({json.dumps(json.dumps(cfg.to_dict()))}))
        def kill(step, record, model):
            if step == 4:
                os.kill(os.getpid(), signal.SIGKILL)
        train(cfg, {str(tmp_path / "run")!r}, progress=False, on_step=kill)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          check=False, timeout=300)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert read_progress(tmp_path / "run")["step"] == 3
    train(cfg, tmp_path / "run", progress=False)
    assert_same_run(straight, tmp_path / "run", exact=False)


def test_resume_rules(data, straight, tmp_path):
    cfg = config(data, tmp_path / "cache")
    before = committed_file(straight).read_bytes()
    again = train(cfg, straight, progress=False)      # complete: nothing to do
    assert again.steps == STEPS and committed_file(straight).read_bytes() == before
    with pytest.raises(ValueError,
                       match=r"holds a posenc run whose settings differ \(model.pe\)"):
        train(config(data, tmp_path / "cache").with_model(pe="alibi"), straight,
              progress=False)
    moved = TrainConfig.from_dict({**cfg.to_dict(), "cache_dir": str(tmp_path / "other"),
                                   "checkpoint_every": 1})
    assert train(moved, straight, progress=False).steps == STEPS
    fresh = train(cfg.__class__.from_dict({**cfg.to_dict(), "steps": 2}), tmp_path / "new",
                  progress=False)                      # nothing there: fresh
    assert fresh.steps == 2 and load_run(tmp_path / "new").steps == 2


def test_changed_checkpoint_file_is_named(data, tmp_path):
    cfg = config(data, tmp_path / "cache")

    def stop(step, record, model):
        if step == 3:
            raise Killed

    with pytest.raises(Killed):
        train(cfg, tmp_path / "run", progress=False, on_step=stop)
    state = committed_file(tmp_path / "run", "state.pt")
    state.write_bytes(bytes(range(256)) * 8)                       # random bytes
    before = sorted(str(p) for p in (tmp_path / "run").rglob("*"))
    with pytest.raises(ValueError, match=r"^corrupt checkpoint .*state\.pt: sha256 ") as err:
        train(cfg, tmp_path / "run", progress=False)
    assert "\n" not in str(err.value) and "weights_only" not in str(err.value)
    assert sorted(str(p) for p in (tmp_path / "run").rglob("*")) == before


def test_corrupt_checkpoint_is_a_clear_error(tmp_path, capsys):
    out = tmp_path / "run"
    data = make_corpus(tmp_path / "data")
    assert main(cli_args(tmp_path, out, "--data", str(data))) == 0
    model_file = committed_file(out)
    good = model_file.read_bytes()
    model_file.write_bytes(good[:len(good) // 2])
    with pytest.raises(ValueError, match=r"^corrupt checkpoint .*model\.safetensors: ") as err:
        load_run(out)
    assert "\n" not in str(err.value)
    assert main(cli_args(tmp_path, out, "--data", str(data), "--steps", "4")) == 2
    one_line_error(capsys, "corrupt checkpoint")
    model_file.write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{}garbage")
    with pytest.raises(ValueError, match="corrupt checkpoint"):
        load_run(out)
    model_file.write_bytes(good)
    (out / "config.json").write_text("{ not json")
    with pytest.raises(ValueError, match=r"^corrupt run config .*config\.json: "):
        load_run(out)
    with pytest.raises(ValueError, match="does not exist"):
        load_run(tmp_path / "elsewhere")
    (out / "config.json").unlink()
    with pytest.raises(ValueError, match="config.json is missing"):
        load_run(out)


def test_a_state_dict_mismatch_names_its_cause_on_one_line(tmp_path, monkeypatch):
    import posenc.train.checkpoint as ckpt
    out = tmp_path / "run"
    assert main(cli_args(tmp_path, out, "--data", str(make_corpus(tmp_path / "data")))) == 0

    def mismatched(model, path, strict=True, device="cpu"):
        torch.nn.Linear(2, 3).load_state_dict({"weight": torch.zeros(4, 2),
                                               "bias": torch.zeros(3)})
    monkeypatch.setattr(ckpt, "load_model", mismatched)
    with pytest.raises(ValueError, match=r"Error\(s\) in loading state_dict for Linear: size "
                                         r"mismatch for weight: copying a param") as err:
        load_run(out)
    assert "\n" not in str(err.value)


def test_a_config_whose_train_block_is_not_a_mapping_says_so(tmp_path):
    out = tmp_path / "run"
    assert main(cli_args(tmp_path, out, "--data", str(make_corpus(tmp_path / "data")))) == 0
    doc = json.loads((out / "config.json").read_text())
    doc["train"] = []
    (out / "config.json").write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=r"^corrupt run config .*config\.json: TrainConfig "
                                         r"must be a mapping of option names to values, got "
                                         r"list"):
        load_run(out)
