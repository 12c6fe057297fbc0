"""The training loop: a run's files and what load_run restores, learning a corpus and a
task, the learning-rate schedule, gradient clipping, bf16 autocast, progress and TensorBoard,
and packed documents (the loss is the mean over each document run alone)."""

from __future__ import annotations

import copy
import json
import math

import pytest
import torch
import torch.nn.functional as F
from safetensors import safe_open

from posenc.data.batches import prepare_data
from posenc.data.corpora import load_corpus
from posenc.data.synthetic import IGNORE
from posenc.models import TransformerLM
from posenc.runio import OUTPUTS_FILE
from posenc.train import load_run, train
from posenc.train.checkpoint import committed_file
from posenc.train.loop import lm_loss, lr_factor
from tests.data.helpers import write_short_files
from tests.train.helpers import tiny


# ------------------------------------------------------------ a whole run
def test_train_writes_a_run_that_load_run_restores(tmp_path):
    cfg = tiny(tmp_path, eval_every=3)
    final = {}
    result = train(cfg, tmp_path / "run", progress=False,
                   on_step=lambda s, r, m: final.update(m.state_dict()) if s == 6 else None)
    run = tmp_path / "run"
    assert {p.name for p in committed_file(run).parent.iterdir()} == {
        "model.safetensors", "state.pt", "manifest.json"}
    assert {p.name for p in run.iterdir()} >= {"config.json", "checkpoints",
                                                "state.json", "log.jsonl", "log.csv",
                                                "tokenizer"}
    assert not [p for p in run.rglob("*") if p.name.endswith(".tmp") or p.name.startswith(
        ".posenc") and p.name != OUTPUTS_FILE]           # the list of outputs stays
    assert len(list((run / "checkpoints").iterdir())) == 1         # older ones were removed
    assert result.steps == 6 and result.tokens_per_s > 0 and math.isfinite(result.final_loss)
    loaded = load_run(run)
    assert not loaded.model.training and loaded.steps == 6 and loaded.complete
    assert loaded.train_config == cfg
    assert loaded.corpus_info == load_corpus(cfg.data).info()
    assert loaded.tokenizer.spec == "byte" and loaded.tokens_per_s == pytest.approx(
        result.tokens_per_s)
    for name, value in loaded.model.state_dict().items():
        torch.testing.assert_close(value, final[name], rtol=0, atol=0)
    assert loaded.model.head.weight is loaded.model.tok.weight          # still tied
    with safe_open(str(committed_file(run)), "pt") as f:          # stored once
        keys = set(f.keys())
        assert f.metadata()["step"] == "6"
    assert ("head.weight" in keys) != ("tok.weight" in keys)
    steps = [r for r in loaded.log if "loss" in r]
    assert [r["step"] for r in steps] == [1, 2, 3, 4, 5, 6]
    assert steps[-1]["loss"] == pytest.approx(result.final_loss)
    assert [r["step"] for r in loaded.log if "val_loss" in r] == [3, 6]
    csv_lines = (run / "log.csv").read_text().splitlines()
    assert csv_lines[0].startswith("step,loss,lr") and len(csv_lines) == 1 + 6 + 2
    doc = json.loads((run / "config.json").read_text())
    assert doc["corpus"]["sha256"] == loaded.corpus_info["sha256"]


def test_training_learns_a_repetitive_corpus(tmp_path):
    folder = tmp_path / "rep"
    folder.mkdir()
    for i in range(12):
        (folder / f"{i}.txt").write_text("abcdefgh" * 200)
    cfg = tiny(tmp_path, data=str(folder), steps=30, lr=1e-2, checkpoint_every=0)
    train(cfg, tmp_path / "run", progress=False)
    log = load_run(tmp_path / "run").log
    assert log[0]["loss"] > 4.0 and log[-1]["val_loss"] < 1.0


def test_learned_encoding_and_a_task_train(tmp_path):
    cfg = tiny(tmp_path, data=None, task="copy", steps=3, model={"pe": "learned"})
    train(cfg, tmp_path / "run", progress=False)
    loaded = load_run(tmp_path / "run")
    assert loaded.corpus_info["name"] == "task:copy"
    assert loaded.model.pe.table.shape == (16, 32)


def test_lr_schedule_warmup_then_cosine(tmp_path):
    assert [lr_factor(s, 4, 20, 0.1) for s in range(4)] == [0.25, 0.5, 0.75, 1.0]
    assert lr_factor(4, 4, 20, 0.1) == 1.0 and lr_factor(19, 4, 20, 0.1) == pytest.approx(0.1)
    mid = lr_factor(4 + 15 // 2, 4, 20, 0.1)
    assert 0.1 < mid < 1.0 and lr_factor(0, 0, 20, 0.0) == 1.0
    cfg = tiny(tmp_path, steps=6, warmup_steps=2, lr=0.01, min_lr_ratio=0.0,
               checkpoint_every=0)
    train(cfg, tmp_path / "run", progress=False)
    lrs = [r["lr"] for r in load_run(tmp_path / "run").log if "lr" in r]
    expected = [0.01 * lr_factor(s, 2, 6, 0.0) for s in range(6)]
    assert lrs == pytest.approx(expected) and lrs[-1] == 0.0


def test_grad_clip_bounds_the_update(tmp_path):
    cfg = tiny(tmp_path, steps=2, grad_clip=1e-3, checkpoint_every=0, warmup_steps=0)
    train(cfg, tmp_path / "run", progress=False)
    assert load_run(tmp_path / "run").log[0]["grad_norm"] > 1e-3     # the norm before clip


def test_model_vocab_must_cover_the_tokenizer(tmp_path):
    with pytest.raises(ValueError, match="vocab_size=100 is smaller than tokenizer 'byte'"):
        train(tiny(tmp_path, model={"vocab_size": 100}), tmp_path / "run", progress=False)
    assert not (tmp_path / "run").exists()


def test_bf16_autocast_progress_bar_and_tensorboard_hook(tmp_path, capsys, monkeypatch):
    from posenc.train import logging as run_logging

    scalars = []

    class FakeWriter:
        def add_scalar(self, tag, value, step):
            scalars.append((tag, step))

        def flush(self):
            pass

        def close(self):
            pass

    monkeypatch.setattr(run_logging, "_summary_writer", lambda path, start: FakeWriter())
    cfg = tiny(tmp_path, steps=2, bf16=True, checkpoint_every=0)
    result = train(cfg, tmp_path / "run", progress=True)
    assert math.isfinite(result.final_loss) and result.final_loss > 1.0
    err = capsys.readouterr().err
    assert "train rope" in err and "loss=" in err and "tok_s=" in err and "2/2" in err
    assert ("train/loss", 1) in scalars and ("train/loss", 2) in scalars
    assert ("val/loss", 2) in scalars
    fp32 = train(tiny(tmp_path, steps=2, checkpoint_every=0), tmp_path / "fp32", progress=False)
    assert fp32.final_loss != result.final_loss                  # autocast changed the math
    assert fp32.final_loss == pytest.approx(result.final_loss, abs=0.1)


# ------------------------------------------------------------ packed documents
def documents_alone(model, batch) -> torch.Tensor:
    """The mean cross-entropy over the scored targets of ``batch``, each document of each row
    run through ``model`` on its own (positions from 0, nothing else in view)."""
    total, count = torch.zeros(()), 0
    for row in range(batch.inputs.shape[0]):
        ids = batch.document_ids[row]
        for doc in ids.unique():
            keep = ids == doc                                      # one contiguous run
            x, y = batch.inputs[row, keep][None], batch.targets[row, keep]
            scored = y != IGNORE
            logits = model(x)[0]                                   # (n, V)
            total = total + F.cross_entropy(logits[scored], y[scored], reduction="sum")
            count += int(scored.sum())
    return total / count


@pytest.mark.parametrize("pe", ["rope", "alibi", "learned"])
def test_packed_loss_is_the_mean_over_documents_run_alone(tmp_path, tiny_lm, pe):
    data = prepare_data(str(write_short_files(tmp_path / "docs", 60)), "byte", None, 16,
                        tmp_path / "cache", pack=True)
    plain = prepare_data(str(tmp_path / "docs"), "byte", None, 16, tmp_path / "cache")
    model = tiny_lm(pe, vocab_size=256, max_len=16).train()        # dropout 0
    step = next(s for s in range(100)                              # every row is packed
                if int(data.batch(4, 16, seed=0, step=s).document_ids[:, -1].min()) >= 1)
    b, p = data.batch(4, 16, seed=0, step=step), plain.batch(4, 16, seed=0, step=step)
    loss = lm_loss(model(b.inputs, document_ids=b.document_ids), b.targets)
    torch.testing.assert_close(loss, documents_alone(model, b), rtol=1e-5, atol=1e-5)
    assert abs(loss.item() - lm_loss(model(p.inputs), p.targets).item()) > 1e-2


def test_the_loop_trains_and_validates_on_packed_documents(tmp_path):
    """The logged loss of step 1 is the initial model's mean over the step's documents run
    alone; the validation loss after it is the same over the validation windows."""
    cfg = tiny(tmp_path, data=str(write_short_files(tmp_path / "docs", 60)), pack=True,
               steps=1, eval_every=1, checkpoint_every=0, eval_windows=16,
               model={"pe": "learned"})
    after = {}
    train(cfg, tmp_path / "run", progress=False,
          on_step=lambda s, r, m: after.update(copy.deepcopy(m.state_dict())))
    log = load_run(tmp_path / "run").log
    data = prepare_data(cfg.data, "byte", None, 16, cfg.cache_dir, pack=True)
    torch.manual_seed(cfg.seed)
    model = TransformerLM(cfg.model).train()                       # as the loop builds it
    with torch.no_grad():
        first = documents_alone(model, data.batch(cfg.batch_size, 16, cfg.seed, 0))
        model.load_state_dict(after)
        held_out = data.validation_set(cfg.eval_windows, 16, cfg.seed)
        assert int((held_out.document_ids[:, -1] > 0).sum()) >= 4       # windows span documents
        val = documents_alone(model.eval(), held_out)
    assert log[0]["loss"] == pytest.approx(first.item(), rel=1e-5)
    assert log[1]["val_loss"] == pytest.approx(val.item(), rel=1e-5)
    assert json.loads((tmp_path / "run" / "config.json").read_text())["train"]["pack"]


# ------------------------------------------------------------ data prepared by the caller
def test_prepared_data_trains_the_same_run_without_loading_again(tmp_path, monkeypatch):
    cfg = tiny(tmp_path)
    prepared = prepare_data(cfg.data, cfg.tokenizer, None, cfg.train_len, cfg.cache_dir)
    own = train(cfg, tmp_path / "own", progress=False)
    import posenc.data.batches as batches

    def no_loading(*args, **kw):
        raise AssertionError("train() loaded the data although it was given")
    monkeypatch.setattr(batches, "prepare_data", no_loading)
    monkeypatch.setattr("posenc.train.loop.prepare_data", no_loading)
    given = train(cfg, tmp_path / "given", progress=False, data=prepared)
    assert given.final_loss == own.final_loss and given.val_loss == own.val_loss


def test_prepared_data_must_match_the_config(tmp_path):
    cfg = tiny(tmp_path)
    prepared = prepare_data(cfg.data, cfg.tokenizer, None, cfg.train_len, cfg.cache_dir)
    with pytest.raises(ValueError, match="prepared data .* is not what the config asks"):
        train(tiny(tmp_path, pack=True), tmp_path / "run", progress=False, data=prepared)
    assert not (tmp_path / "run").exists()


def test_resuming_with_prepared_data_needs_the_runs_own_tokenizer(tmp_path):
    from dataclasses import replace
    cfg = tiny(tmp_path, tokenizer="bpe:300", model={"vocab_size": 300})
    prepared = prepare_data(cfg.data, cfg.tokenizer, None, cfg.train_len, cfg.cache_dir)

    def stop_at_3(step, record, model):
        if step == 3:
            raise RuntimeError("stopped")
    with pytest.raises(RuntimeError, match="stopped"):
        train(cfg, tmp_path / "run", progress=False, data=prepared, on_step=stop_at_3)
    other = prepare_data(str(write_short_files(tmp_path / "other", 40)), cfg.tokenizer, None,
                         cfg.train_len, cfg.cache_dir).tokenizer
    assert other.fingerprint != prepared.tokenizer.fingerprint
    with pytest.raises(ValueError, match="is not the one .* was trained with"):
        train(cfg, tmp_path / "run", progress=False,
              data=replace(prepared, tokenizer=other))
    done = train(cfg, tmp_path / "run", progress=False, data=prepared)
    assert done.steps == 6


def test_a_rerun_resumes_and_refusals_name_the_options_as_the_caller_spells_them(tmp_path):
    from dataclasses import replace

    from posenc.study import CLI_NAMES
    cfg = tiny(tmp_path, steps=2, checkpoint_every=2)
    train(cfg, tmp_path / "run", progress=False)
    assert train(cfg, tmp_path / "run", progress=False).steps == 2     # complete: resumed
    other = replace(cfg, lr=cfg.lr * 2)
    with pytest.raises(ValueError, match=r"pass overwrite=True to replace it or choose "
                                         r"another run_dir"):
        train(other, tmp_path / "run", progress=False)
    with pytest.raises(ValueError, match=r"pass --overwrite to replace it or choose another "
                                         r"--out"):
        train(other, tmp_path / "run", progress=False, names=CLI_NAMES)
