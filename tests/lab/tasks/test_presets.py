"""Task study presets and config validation."""

from __future__ import annotations

import pytest

from posenc.errors import UserError
from posenc.lab.tasks import study as task_study
from posenc.lab.tasks.presets import TASK_PRESETS, TaskStudyConfig, task_preset

pytestmark = pytest.mark.usefixtures("single_thread")


def test_presets_and_config_validation():
    assert set(TASK_PRESETS) == {"tasks", "tasks-cope", "tasks-state", "tasks-paper",
                                 "tasks-smoke"}
    cfg = task_preset("tasks")
    assert cfg.lm_lengths[0] == cfg.train_len and cfg.lm_lengths[-1] == 2 * cfg.train_len
    assert cfg.train_len == 20                     # up to 10 letters, tested on up to 20
    assert len(cfg.seeds) >= 2
    with pytest.raises(ValueError, match="unknown task preset 'x'"):
        task_preset("x")
    with pytest.raises(ValueError, match="unknown encoding"):
        TaskStudyConfig(encodings=("nope", "bogus"))
    with pytest.raises(ValueError, match="length_multipliers must start at 1"):
        TaskStudyConfig(length_multipliers=(2, 4))
    with pytest.raises(ValueError, match="seeds lists 1 more than once"):
        TaskStudyConfig(seeds=(1, 1))
    with pytest.raises(ValueError, match="valid: reverse, sort"):
        TaskStudyConfig(seq2seq_task="copy")
    with pytest.raises(ValueError, match="seeds must be a count >= 1"):
        task_study.resolve_config("tasks", 0, None)


#: the config block of a task study's results.json written before the model and training
#: settings were nested (``--preset tasks-smoke``)
FLAT_TASKS_SMOKE = {
    "preset": "tasks-smoke", "encodings": ["nope", "alibi"], "seq2seq_encodings": ["rope"],
    "seeds": [0, 1], "lm_tasks": ["copy"], "train_len": 8, "min_train_len": None,
    "length_multipliers": [1, 2], "d_model": 16, "n_layers": 1, "n_heads": 2, "steps": 4,
    "batch_size": 4, "lr": 0.003, "seq2seq_task": "reverse", "seq2seq_len": 4,
    "seq2seq_min_len": 2, "seq2seq_layers": 1, "seq2seq_steps": 4, "seq2seq_lr": 0.005,
    "eval_examples": 8, "eval_seed": 1000003}


def test_the_config_nests_model_and_training_and_reads_the_flat_form():
    smoke = TASK_PRESETS["tasks-smoke"]
    assert TaskStudyConfig.from_dict(FLAT_TASKS_SMOKE) == smoke
    data = smoke.to_dict()
    assert data["model"]["d_model"] == 16 and data["seq2seq_train"]["max_len"] == 4
    assert data["train"]["max_len"] == data["model"]["max_len"] == smoke.train_len == 8
    assert TaskStudyConfig.from_dict(data) == smoke
    run = smoke.train_config("lm", "copy", seed=1)
    assert (run.min_len, run.max_len, run.seed, run.lr) == (2, 8, 1, 0.003)
    assert smoke.train_config("seq2seq", "reverse", seed=0).lr == 0.005
    assert smoke.with_options(**{"train.weight_decay": 0.1}).setting()["train.weight_decay"] \
        == 0.1
    with pytest.raises(ValueError, match="unknown task study option 'width'"):
        smoke.with_options(width=3)


def test_the_paper_task_preset_mirrors_kazemnejad_et_al():
    cfg = task_preset("tasks-paper")
    assert cfg.encodings == ("nope", "t5", "alibi", "rope", "sinusoidal")
    assert cfg.seq2seq_task is None and cfg.seq2seq_encodings == ()
    assert (cfg.model.n_layers, cfg.model.d_model, cfg.model.n_heads) == (12, 768, 12)
    assert (cfg.train.steps, cfg.train.batch_size, cfg.train.lr) == (50_000, 256, 3e-4)
    assert cfg.train.warmup == 0.06 * cfg.train.steps and cfg.train.weight_decay == 0
    assert cfg.train_len // 2 == 20 and cfg.lm_lengths[-1] == 2 * cfg.train_len   # 20 -> 40


def test_the_paper_task_preset_runs_at_a_smoke_size_on_the_cpu(tmp_path):
    cfg = task_preset("tasks-paper", d_model=16, n_layers=1, n_heads=2, steps=2,
                      batch_size=4, train_len=8, eval_examples=4, seeds=(0,),
                      encodings=("nope", "alibi"))
    results = task_study.run_task_study(tmp_path, cfg, progress=False)
    scored = {(r["task"], r["encoding"]) for r in results["runs"] if r["part"] == "lm"}
    assert scored == {(t, e) for t in ("copy", "reverse", "addition") for e in ("nope", "alibi")}
    assert (tmp_path / "report.md").exists()


def test_a_seed_count_above_the_bound_is_refused_before_any_list_is_built():
    with pytest.raises(UserError, match="seeds must be at most 1000"):
        task_study.resolve_config("tasks", 100_000_000_000, None)
    with pytest.raises(UserError, match="number of seeds must be at most 1000"):
        TaskStudyConfig(seeds=tuple(range(1001)))
    assert len(task_study.resolve_config("tasks", 1000, None).seeds) == 1000


def test_the_state_preset_tracks_flip_flop_past_l_with_stick_breaking():
    cfg = task_preset("tasks-state")
    assert cfg.lm_tasks == ("flip_flop",) and cfg.seq2seq_task is None
    assert set(cfg.encodings) == {"rope", "nope", "alibi", "stick_breaking", "path"}
    assert len(cfg.seeds) == 3 and cfg.lm_lengths[-1] > cfg.train_len
    model = task_study.build_model(cfg, "lm", "stick_breaking", cfg.train_len)
    assert (model.config.pe, model.config.attn_form) == ("nope", "stick_breaking")
    assert task_study.build_model(cfg, "lm", "alibi", 8).config.attn_form == "softmax"
    both = task_study.resolve_config("tasks", None, ["rope", "stick_breaking"])
    assert both.encodings == ("rope", "stick_breaking") and both.seq2seq_encodings == ("rope",)
    with pytest.raises(ValueError, match="lab variants: p_rope"):
        TaskStudyConfig(seq2seq_encodings=("stick_breaking",), encodings=("bogus",))
