"""The synthetic-task study: results.json, report and figure of a real tiny study;
resuming and growing; another setting or a foreign directory refused."""

from __future__ import annotations

import json
import math
import re
import time
from pathlib import Path

import pytest

from posenc.errors import UserError
from posenc.lab.tasks import study as task_study
from posenc.lab.tasks.study import run_task_study
from tests.lab.helpers import TINY, fake_runs

pytestmark = pytest.mark.usefixtures("single_thread")


def test_a_real_tiny_study_writes_results_report_and_figure(tmp_path):
    results = run_task_study(tmp_path, TINY, progress=False)
    on_disk = json.loads((tmp_path / "results.json").read_text())
    assert (on_disk["kind"], on_disk["schema"]) == ("tasks", 1)
    assert on_disk["config"] == TINY.to_dict()
    keys = sorted((r["part"], r["task"], r["encoding"], r["seed"]) for r in on_disk["runs"])
    assert keys == sorted(task_study.planned_runs(TINY)) and len(keys) == 6
    for run in on_disk["runs"]:
        lengths = TINY.lm_lengths if run["part"] == "lm" else TINY.seq2seq_lengths
        assert sorted(map(int, run["lengths"])) == list(lengths)
        for cell in run["lengths"].values():
            assert 0.0 <= cell["exact_match"] <= cell["token_accuracy"] <= 1.0
            assert cell["n_examples"] == 5
        assert math.isfinite(run["final_loss"]) and run["curve"][-1][0] == 3
    cell = on_disk["summary"]["lm"]["copy"]["alibi"]["exact_match"]["16"]
    values = [r["lengths"]["16"]["exact_match"] for r in on_disk["runs"]
              if r["encoding"] == "alibi"]
    assert cell["values"] == values and cell["mean"] == pytest.approx(sum(values) / 2)
    report = (tmp_path / "report.md").read_text()
    assert "## Decoder-only models: copy" in report and "## Encoder-decoder models: reverse" \
        in report and "Kazemnejad et al. (2023)" in report
    assert "![accuracy against length](task_accuracy.png)" in report
    assert (tmp_path / "task_accuracy.png").stat().st_size > 10_000
    assert results["trained"] == [list(k) for k in task_study.planned_runs(TINY)]


def test_a_rerun_skips_finished_runs_and_more_seeds_train_only_the_new_ones(
        tmp_path, monkeypatch):
    calls = fake_runs(monkeypatch)
    run_task_study(tmp_path, TINY, progress=False)
    assert len(calls) == 6
    again = run_task_study(tmp_path, TINY, progress=False)
    assert len(calls) == 6 and again["trained"] == []
    grown = run_task_study(tmp_path, TINY, seeds=3, encodings=["nope", "t5"], progress=False)
    assert calls[6:] == [("lm", "copy", "nope", 2), ("lm", "copy", "t5", 0),
                         ("lm", "copy", "t5", 1), ("lm", "copy", "t5", 2),
                         *[("seq2seq", "reverse", e, s) for e in ("nope", "t5")
                           for s in (0, 1, 2)]]
    assert grown["config"]["encodings"] == ["nope", "alibi", "t5"]
    assert grown["config"]["seq2seq_encodings"] == ["rope", "nope", "t5"]
    assert grown["config"]["seeds"] == [0, 1, 2] and len(grown["runs"]) == 16
    fresh = run_task_study(tmp_path, TINY, progress=False, overwrite=True)
    assert len(calls) == 6 + 10 + 6 and len(fresh["runs"]) == 6
    assert json.loads((tmp_path / "results.json").read_text())["config"] == TINY.to_dict()


def test_another_setting_or_a_foreign_directory_is_refused(tmp_path, monkeypatch):
    fake_runs(monkeypatch)
    run_task_study(tmp_path / "a", TINY, progress=False)
    longer = TINY.with_options(steps=4, lr=1e-3)
    with pytest.raises(ValueError, match=r"settings differ \(differs in train.lr, train.steps;"):
        run_task_study(tmp_path / "a", longer, progress=False)
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="holds no posenc task study"):
        run_task_study(tmp_path / "b", TINY, progress=False)
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "results.json").write_text('{"config": {}, "runs": []}')
    with pytest.raises(ValueError, match="results.json that posenc tasks did not write"):
        run_task_study(tmp_path / "c", TINY, progress=False)


def test_a_study_written_before_schemas_grows_and_overwrite_keeps_foreign_files(
        tmp_path, monkeypatch):
    from tests.lab.tasks.test_presets import FLAT_TASKS_SMOKE
    calls = fake_runs(monkeypatch)
    old = {"kind": "posenc task study", "config": {**FLAT_TASKS_SMOKE, "seeds": [0]},
           "runs": []}
    run_task_study(tmp_path, "tasks-smoke", seeds=1, progress=False)   # what it held then
    old["runs"] = json.loads((tmp_path / "results.json").read_text())["runs"]
    (tmp_path / "results.json").write_text(json.dumps(old))
    grown = run_task_study(tmp_path, "tasks-smoke", seeds=2, progress=False)
    assert grown["trained"] == [["lm", "copy", "nope", 1], ["lm", "copy", "alibi", 1],
                                ["seq2seq", "reverse", "rope", 1]]
    on_disk = json.loads((tmp_path / "results.json").read_text())
    assert on_disk["kind"] == "tasks" and on_disk["config"]["train"]["steps"] == 4
    (tmp_path / "notes.txt").write_text("mine")
    before = len(calls)
    run_task_study(tmp_path, "tasks-smoke", seeds=1, progress=False, overwrite=True)
    assert len(calls) == before + 3
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        ".posenc-outputs.json", "notes.txt", "report.md", "results.json", "task_accuracy.png"]


def test_the_report_explains_a_failure_by_construction(tmp_path, monkeypatch):
    fake_runs(monkeypatch)
    from dataclasses import replace
    run_task_study(tmp_path, replace(TINY, seq2seq_encodings=("rope", "alibi")),
                   progress=False)
    part = (tmp_path / "report.md").read_text().split("## Encoder-decoder models: reverse")[1]
    part = part.split("\n## ")[0]
    assert "- **alibi** on reverse: structurally unlearnable" in part
    assert "mirror-symmetric" in part and "**rope** on reverse" not in part


def test_runs_side_by_side_equal_the_runs_of_one_process(tmp_path):
    """Two worker processes of one thread train the same runs as the study's own process
    (one thread too): equal numbers, in plan order."""
    one = run_task_study(tmp_path / "one", "tasks-smoke", seeds=1, progress=False)
    two = run_task_study(tmp_path / "two", "tasks-smoke", seeds=1, progress=False, workers=2)

    def runs(results):
        return [{k: v for k, v in run.items() if k != "seconds"} for run in results["runs"]]
    assert runs(two) == runs(one) and len(runs(one)) == 3
    assert two["trained"] == one["trained"]


def test_workers_must_be_a_positive_count(tmp_path):
    with pytest.raises(ValueError, match="workers"):
        run_task_study(tmp_path, "tasks-smoke", progress=False, workers=0)


#: hand edits of a task study's results.json: (the edit, the field named, broken run or not)
EDITS = {
    "no_part": (lambda d: d["runs"][1].pop("part"), r"runs\[1\].part must be one of", True),
    "text_accuracy": (lambda d: d["runs"][4]["lengths"]["6"].update(exact_match="0.9"),
                      r"runs\[4\].lengths\['6'\].exact_match must be a number", True),
    "no_config": (lambda d: d.pop("config"), "config must be an object", False),
    "runs_object": (lambda d: d.update(runs={}), "runs must be a list of runs", False),
}


@pytest.mark.parametrize("name", sorted(EDITS))
def test_a_hand_edited_study_is_refused_in_one_line_or_its_broken_run_trained_again(
        tmp_path, monkeypatch, capsys, name):
    from posenc.cli import main
    calls = fake_runs(monkeypatch)
    run_task_study(tmp_path, TINY, progress=False)
    path = tmp_path / "results.json"
    data = json.loads(path.read_text())
    edit, field, a_run = EDITS[name]
    broken = dict(data["runs"][1 if name == "no_part" else 4]) if a_run else None
    edit(data)
    path.write_text(json.dumps(data))
    assert main(["plot", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and str(path) in err and re.search(field, err)
    if not a_run:
        with pytest.raises(UserError, match=field):
            run_task_study(tmp_path, TINY, progress=False)
        return
    again = run_task_study(tmp_path, TINY, progress=False)
    assert calls[6:] == [task_study.run_key(broken)] and len(again["runs"]) == 6
    assert main(["plot", str(tmp_path)]) == 0


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_a_killed_task_study_leaves_no_worker_and_no_held_lock(tmp_path):
    """SIGKILL to a task study training with 2 workers: within seconds no process it started
    runs on, and its folder can be taken at once (no lock held by an orphan)."""
    import os
    import subprocess
    import sys

    from posenc.runio import DirectoryLock
    from tests.helpers import kill_and_expect_no_survivors, process_tree, wait_for
    out = tmp_path / "tasks"
    code = ("from posenc.lab.tasks.presets import task_preset\n"
            "from posenc.lab.tasks.study import run_task_study\n"
            "cfg = task_preset('tasks-smoke').with_options(steps=100000, seq2seq_steps=100000)\n"
            f"run_task_study({str(out)!r}, cfg, progress=False, workers=2)\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path),
           "POSENC_CACHE_DIR": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1"}
    parent = subprocess.Popen([sys.executable, "-c", code], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    started: set[int] = set()
    try:
        wait_for(lambda: len(process_tree(parent.pid)) >= 2 or parent.poll() is not None,
                 120, "the workers to start")
        assert parent.poll() is None, parent.stderr.read().decode()
        time.sleep(3)                                      # the workers are training
        started = process_tree(parent.pid)
    finally:
        kill_and_expect_no_survivors(parent, started)
    with DirectoryLock(out, "posenc tasks"):             # free at once: nobody holds it
        pass


def test_a_flip_flop_study_scores_the_sparse_language_too_and_trains_stick_breaking(tmp_path):
    from dataclasses import replace
    cfg = replace(TINY, encodings=("stick_breaking",), lm_tasks=("flip_flop",),
                  seq2seq_task=None, seq2seq_encodings=(), seeds=(0,))
    run_task_study(tmp_path, cfg, progress=False)
    run = json.loads((tmp_path / "results.json").read_text())["runs"][0]
    assert run["encoding"] == "stick_breaking" and run["task"] == "flip_flop"
    shifted = run["out_of_distribution"]
    assert shifted["task"] == "flip_flop_sparse"
    assert sorted(map(int, shifted["lengths"])) == list(cfg.lm_lengths)
    report = (tmp_path / "report.md").read_text()
    assert "Out of distribution: the same models on `flip_flop_sparse`" in report
