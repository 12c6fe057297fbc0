"""Comparison presets: options that follow the model size, config validation and the nested
form (options by short or dotted name, round trips)."""

import json
from dataclasses import replace

import pytest

from posenc.errors import UserError
from posenc.lab.compare.presets import PRESETS, CompareConfig


def test_options_follow_the_model_size():
    cfg = PRESETS["default"].with_options(d_model=64, train_len=64)
    assert cfg.options_for("sinusoidal") == {"scale": 0.125}
    assert cfg.options_for("t5") == {"max_distance": 64}
    assert cfg.with_options(train_len=16).options_for("t5") == {"max_distance": 32}
    assert cfg.with_options(train_len=512).options_for("t5") == {}
    given = replace(cfg, pe_options={"t5": {"max_distance": 256}, "sinusoidal": {"scale": 1}})
    assert given.options_for("t5") == {"max_distance": 256}
    assert given.options_for("sinusoidal") == {"scale": 1}


@pytest.mark.parametrize("bad", ["train_len", "encodings", "seeds"])
def test_compare_config_validates(bad):
    value = {"train_len": 1, "encodings": ("warp",), "seeds": 0}[bad]
    with pytest.raises(ValueError, match=bad):
        CompareConfig().with_options(**{bad: value})


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_to_dict_and_from_dict_round_trip(name):
    data = PRESETS[name].to_dict()
    assert set(data["train"]) >= {"model", "lr", "betas", "steps"}
    assert json.loads(json.dumps(data)) == data
    assert CompareConfig.from_dict(data).to_dict() == data


def test_options_map_onto_the_nested_fields():
    cfg = PRESETS["smoke"].with_options(steps=7, d_model=64, **{"train.lr": 1e-3,
                                                                 "model.n_layers": 3})
    assert (cfg.train.steps, cfg.train.lr, cfg.model.d_model, cfg.model.n_layers) == (
        7, 1e-3, 64, 3)
    assert cfg.with_options(train_len=32).model.max_len == 32     # the training length
    per_run = cfg.train_config("alibi", vocab_size=300, seed=4)
    assert (per_run.model.pe, per_run.model.vocab_size, per_run.seed) == ("alibi", 300, 4)
    assert per_run.checkpoint_every == 1 and per_run.model.d_model == 64
    with pytest.raises(ValueError, match=r"unknown compare option\(s\) model.pe; valid"):
        cfg.with_options(**{"model.pe": "nope"})


def test_the_paper_preset_mirrors_the_alibi_papers_setting_without_a_handicap():
    from posenc.lab.claims.handicaps import shape_handicaps
    from posenc.lab.compare.presets import PAPER_STEPS
    cfg = PRESETS["paper"]
    assert cfg.encodings == ("sinusoidal", "rope", "t5", "alibi")       # their Table 2
    m = cfg.model
    assert (m.n_layers, m.d_model, m.n_heads, m.d_ff, m.dropout) == (16, 1024, 8, 4096, 0.3)
    assert (cfg.train_len, cfg.train.batch_size * cfg.train_len) == (512, 9216)
    assert cfg.train.data == "shakespeare" and cfg.train.steps == PAPER_STEPS
    epochs = PAPER_STEPS * 9216 / 1_398_828          # Shakespeare's BPE-8192 training tokens
    assert abs(epochs - 286_000 * 9216 / 103_227_021) < 0.5        # the paper's ~25.5 epochs
    assert shape_handicaps(cfg.to_dict()) == {}


def test_the_paper_preset_runs_at_a_smoke_size_on_the_cpu(tmp_path, monkeypatch):
    from posenc.lab.compare.presets import preset
    from posenc.lab.compare.study import run_compare
    monkeypatch.setenv("POSENC_CACHE_DIR", str(tmp_path / "cache"))
    cfg = preset("paper", d_model=32, n_layers=1, n_heads=2, d_ff=64, steps=2, train_len=16,
                 batch_size=2, warmup_steps=1, tokenizer="byte", bf16=False, lengths=(16, 32),
                 eval_tokens=64, scalings=(), entropy_max_len=0, timing_rounds=0)
    outcome = run_compare(cfg, tmp_path / "out", progress=False, atlas=False)
    assert outcome.results["corpus"]["name"].startswith("shakespeare")
    assert {r["label"] for r in outcome.results["runs"]} == set(cfg.encodings)
    assert "## Compared with the ALiBi paper" in outcome.report.read_text()


def test_a_seed_count_above_the_bound_is_refused():
    with pytest.raises(UserError, match="seeds must be at most 1000"):
        CompareConfig().with_options(seeds=100_000_000_000)
    assert CompareConfig().with_options(seeds=1000).seeds == 1000
