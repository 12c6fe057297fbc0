"""Task study presets and config validation."""

from __future__ import annotations

import pytest

from posenc.lab import task_study
from posenc.lab.task_presets import TASK_PRESETS, TaskStudyConfig, task_preset

pytestmark = pytest.mark.usefixtures("single_thread")


def test_presets_and_config_validation():
    assert set(TASK_PRESETS) == {"tasks", "tasks-smoke"}
    cfg = task_preset("tasks")
    assert cfg.lm_lengths[0] == cfg.train_len and cfg.lm_lengths[-1] == 8 * cfg.train_len
    assert len(cfg.seeds) >= 2
    with pytest.raises(ValueError, match="unknown task preset 'x'"):
        task_preset("x")
    with pytest.raises(ValueError, match="unknown encoding"):
        TaskStudyConfig(encodings=("nope", "bogus"))
    with pytest.raises(ValueError, match="length_multipliers must start at 1"):
        TaskStudyConfig(length_multipliers=(2, 4))
    with pytest.raises(ValueError, match="seeds must be distinct"):
        TaskStudyConfig(seeds=(1, 1))
    with pytest.raises(ValueError, match="valid: reverse, sort"):
        TaskStudyConfig(seq2seq_task="copy")
    with pytest.raises(ValueError, match="seeds must be a count >= 1"):
        task_study.resolve_config("tasks", 0, None)
