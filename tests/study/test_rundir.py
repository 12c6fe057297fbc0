"""The run directory: refusals in one line, typed results, overwrite that spares the user."""

from __future__ import annotations

import json

import pytest

from posenc.errors import UserError
from posenc.runio import LOCK_FILE, OUTPUTS_FILE, DirectoryInUse, atomic_write
from posenc.study import CLI_NAMES, RunDirectory, StudyKind, read_study_results

KIND = StudyKind("toy", 2, "posenc toy", ("results.json", "report.md", "atlas/a.png"),
                 legacy=lambda d: {"config", "runs"} <= set(d),
                 migrate=lambda d, schema: {**d, "migrated_from": schema},
                 named_outputs=lambda r: [f"runs/{name}/seed0/model.bin" for name in r["runs"]])
OTHER = StudyKind("other", 1, "posenc other", ("results.json",))
#: a user's files whose names look like a study's outputs (or sit in its run folder)
LOOK_ALIKES = ("runs/mynotes/seedlings.txt", "runs/rope/seed0-backup-of-good-run/model.bin",
               "atlas/my_figure.png", "passkey_my_slide.png", "runs/rope/seed0/.notes.tmp")


def _never(existing):
    return None


def _claimed(path, results=None):
    with RunDirectory(path, KIND) as rd:
        rd.open(_never)
        rd.claim()
        rd.save(results or {"config": {"a": 1}, "runs": []})
    return path


def test_new_folder_is_made_only_when_claimed(tmp_path):
    out = tmp_path / "new"
    with RunDirectory(out, KIND) as rd:
        assert rd.open(_never) is None
        assert not out.exists()                       # opening writes nothing
        rd.claim()
        path = rd.save({"config": {}, "runs": []})
        assert (out / LOCK_FILE).exists()
    doc = json.loads(path.read_text())
    assert list(doc)[:2] == ["kind", "schema"] and doc["kind"] == "toy" and doc["schema"] == 2
    assert not (out / LOCK_FILE).exists()


def test_resume_returns_the_results_and_a_second_writer_is_refused(tmp_path):
    out = _claimed(tmp_path / "s")
    with RunDirectory(out, KIND) as rd:
        assert rd.open(_never)["config"] == {"a": 1}
        with pytest.raises(DirectoryInUse), RunDirectory(out, KIND):
            pass


def test_incomparable_settings_are_refused_with_the_reason_and_the_callers_words(tmp_path):
    out = _claimed(tmp_path / "s")
    with RunDirectory(out, KIND) as rd, pytest.raises(UserError) as err:
        rd.open(lambda e: "steps 10 -> 20")
    assert "steps 10 -> 20" in str(err.value) and "overwrite=True" in str(err.value)
    with RunDirectory(out, KIND, CLI_NAMES) as rd, pytest.raises(UserError, match="--overwrite"):
        rd.open(lambda e: "steps 10 -> 20")
    with RunDirectory(out, KIND) as rd:
        assert rd.open(lambda e: "differs", overwrite=True) is None


def test_a_folder_posenc_did_not_write_is_refused_even_with_overwrite(tmp_path):
    out = tmp_path / "mine"
    (out / "runs" / "mine").mkdir(parents=True)
    (out / "runs" / "mine" / "keep.txt").write_text("precious")
    for overwrite in (False, True):
        with RunDirectory(out, KIND) as rd, pytest.raises(UserError, match="not empty"):
            rd.open(_never, overwrite)
    (out / "results.json").write_text('{"something": "else"}')
    for overwrite in (False, True):
        with RunDirectory(out, KIND) as rd, pytest.raises(UserError, match="did not write"):
            rd.open(_never, overwrite)
    assert (out / "runs" / "mine" / "keep.txt").read_text() == "precious"


def test_another_studys_folder_is_named(tmp_path):
    out = tmp_path / "o"
    with RunDirectory(out, OTHER) as rd:
        rd.open(_never)
        rd.claim()
        rd.save({})
    with RunDirectory(out, KIND) as rd, pytest.raises(UserError, match="posenc other study"):
        rd.open(_never)


def _user_files(out, names=LOOK_ALIKES):
    for rel in names:
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_text("the user's")


def _files(out):
    return sorted(p.relative_to(out).as_posix() for p in out.rglob("*")
                  if p.is_file() and p.name not in (LOCK_FILE, OUTPUTS_FILE))


def _write_a_study(out, kind):
    """Write as a comparison and an extension do: results and report through the run
    directory, figures through the atomic writer, a run's files announced before training."""
    from matplotlib.figure import Figure

    from posenc.lab.compare.one_run import announce_run
    from posenc.viz.axes import save_png
    with RunDirectory(out, kind) as rd:
        rd.open(_never)
        rd.claim()
        rd.save({"config": {}, "runs": ["rope"], "methods": {}, "n_tokens": 1})
        rd.write("report.md", "# report\n")
        (out / "atlas").mkdir(exist_ok=True)
        save_png(Figure(figsize=(1, 1)), out / "atlas" / "rope_decay.png")
        save_png(Figure(figsize=(1, 1)), out / "passkey_yarn.png")
        run = out / "runs" / "rope" / "seed0"
        announce_run(run)                          # what ensure_trained does before train()
        (run / "checkpoints").mkdir(parents=True)
        atomic_write(run / "config.json", b"{}")
        (run / "checkpoints" / "model.safetensors").write_bytes(b"w")   # not announced


@pytest.mark.parametrize("kind", ["compare", "extend"])
def test_overwrite_removes_what_the_study_wrote_and_no_look_alike(tmp_path, kind):
    """``compare --overwrite`` and ``extend --force`` deleted a user's
    runs/mynotes/seedlings.txt, runs/rope/seed0-backup-of-good-run/, atlas/my_figure.png and
    passkey_my_slide.png: their patterns matched. Only what was written goes now."""
    from posenc.hf.extend_study import EXTEND_KIND
    from posenc.lab.compare.results import COMPARE_KIND
    study = {"compare": COMPARE_KIND, "extend": EXTEND_KIND}[kind]
    out = tmp_path / "study"
    _write_a_study(out, study)
    listed = json.loads((out / OUTPUTS_FILE).read_text())["outputs"]
    assert listed[:4] == ["atlas/rope_decay.png", "passkey_yarn.png", "report.md",
                          "results.json"]
    assert {"runs/rope/seed0/checkpoints", "runs/rope/seed0/config.json"} <= set(listed[4:])
    assert all(name.startswith("runs/rope/seed0/") for name in listed[4:])
    _user_files(out)
    with RunDirectory(out, study) as rd:
        assert rd.open(_never, overwrite=True) is None
        rd.claim(overwrite=True)
    assert _files(out) == sorted(LOOK_ALIKES)
    assert json.loads((out / OUTPUTS_FILE).read_text())["outputs"] == []


def test_outputs_are_listed_before_they_are_written(tmp_path, monkeypatch):
    """A write cut short still leaves its name in the list (what is on disk is listed)."""
    import os
    out = _claimed(tmp_path / "s")
    real_replace = os.replace

    def killed(src, dst):                          # killed while renaming the report
        if str(dst).endswith("report.md"):
            raise KeyboardInterrupt
        real_replace(src, dst)
    with RunDirectory(out, KIND) as rd:
        rd.open(_never)
        rd.claim()
        monkeypatch.setattr(os, "replace", killed)
        with pytest.raises(KeyboardInterrupt):
            rd.write("report.md", "# report\n")
    monkeypatch.undo()
    assert "report.md" in json.loads((out / OUTPUTS_FILE).read_text())["outputs"]
    with RunDirectory(out, KIND) as rd:
        rd.open(_never)
        rd.claim()
        rd.write("report.md", "# report\n")
    assert "report.md" in json.loads((out / OUTPUTS_FILE).read_text())["outputs"]


def test_an_older_folder_loses_only_the_exact_names_it_knows_and_is_told_the_rest(tmp_path):
    """results.json from before outputs were listed: the names the study knows go (the run
    folders its results name, never a pattern); a warning names what stays."""
    out = tmp_path / "old"
    out.mkdir()
    (out / "results.json").write_text(json.dumps({"config": {}, "runs": ["rope"]}))
    for rel in ("report.md", "atlas/a.png", "runs/rope/seed0/model.bin", "runs/alibi/seed0/x"):
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_text("posenc's")
    _user_files(out)
    with RunDirectory(out, KIND) as rd:
        rd.open(_never, overwrite=True)
        with pytest.warns(UserWarning, match="left 6 file") as caught:
            rd.claim(overwrite=True)
    message = str(caught[0].message)
    assert all(name in message for name in [*LOOK_ALIKES, "runs/alibi/seed0/x"])
    assert _files(out) == sorted([*LOOK_ALIKES, "runs/alibi/seed0/x"])


def test_an_older_comparison_loses_its_run_folders_and_atlas_by_name(tmp_path):
    from posenc.lab.compare.results import COMPARE_KIND
    out = tmp_path / "old"
    out.mkdir()
    config = {"encodings": ["rope", "alibi"], "seeds": 1, "train": {"seed": 0}}
    (out / "results.json").write_text(json.dumps({"kind": "compare", "schema": 1,
                                                  "config": config, "corpus": {},
                                                  "runs": []}))
    for rel in ("report.md", "atlas/rope_decay.png", "atlas/index.html",
                "runs/rope/seed0/config.json", "runs/alibi/seed0/checkpoints/x"):
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_text("posenc's")
    _user_files(out)
    with RunDirectory(out, COMPARE_KIND) as rd:
        rd.open(_never, overwrite=True)
        with pytest.warns(UserWarning, match="left 5 file"):
            rd.claim(overwrite=True)
    assert _files(out) == sorted(LOOK_ALIKES)


def test_a_resumed_older_folder_lists_its_known_outputs_at_once(tmp_path):
    out = tmp_path / "old"
    (out / "runs" / "rope" / "seed0").mkdir(parents=True)
    (out / "runs" / "rope" / "seed0" / "model.bin").write_text("posenc's")
    (out / "results.json").write_text(json.dumps({"config": {}, "runs": ["rope"]}))
    _user_files(out)
    with RunDirectory(out, KIND) as rd:
        assert rd.open(_never) is not None
        rd.claim()
    assert json.loads((out / OUTPUTS_FILE).read_text())["outputs"] == [
        "results.json", "runs/rope/seed0/model.bin"]


def test_a_damaged_list_is_refused_and_nothing_is_removed(tmp_path):
    out = _claimed(tmp_path / "s")
    (out / OUTPUTS_FILE).write_text("{not json")
    with RunDirectory(out, KIND) as rd, pytest.raises(UserError, match="damaged"):
        rd.open(_never, overwrite=True)
        rd.claim(overwrite=True)
    assert (out / "results.json").exists()


def test_listed_names_never_leave_the_folder(tmp_path):
    out = _claimed(tmp_path / "s")
    (tmp_path / "outside.txt").write_text("x")
    (out / OUTPUTS_FILE).write_text(json.dumps({"format": "posenc-outputs", "version": 1,
                                                "outputs": ["../outside.txt", "/etc/passwd",
                                                            "results.json"]}))
    with RunDirectory(out, KIND) as rd:
        rd.open(_never, overwrite=True)
        rd.claim(overwrite=True)
    assert (tmp_path / "outside.txt").exists() and not (out / "results.json").exists()


def test_outputs_are_exact_names():
    with pytest.raises(ValueError, match="exact relative names"):
        StudyKind("toy", 1, "posenc toy", ("results.json", "passkey_*.png"))


def test_claim_removes_stale_temporaries_in_output_folders(tmp_path):
    out = _claimed(tmp_path / "s")
    (out / "atlas").mkdir()
    stale = [out / ".posenc-tmp-results.json.abcd1234.tmp",
             out / "atlas" / ".posenc-tmp-a.png.x_yz7890.tmp"]
    mine = [out / ".notes.backup01.tmp", out / "atlas" / ".thesis.20241127.tmp"]
    for p in stale + mine:
        p.write_text("half")
    with RunDirectory(out, KIND) as rd:
        rd.open(_never)
        rd.claim()
    assert not any(p.exists() for p in stale) and all(p.exists() for p in mine)


def test_schemas_legacy_newer_and_invalid(tmp_path):
    out = tmp_path / "s"
    out.mkdir()
    (out / "results.json").write_text(json.dumps({"config": {}, "runs": []}))   # legacy
    with RunDirectory(out, KIND) as rd:
        assert rd.open(_never)["migrated_from"] == 0
    (out / "results.json").write_text(json.dumps({"kind": "toy", "schema": 1}))
    assert read_study_results(out, (OTHER, KIND))[1]["migrated_from"] == 1
    (out / "results.json").write_text(json.dumps({"kind": "toy", "schema": 3}))
    with pytest.raises(UserError, match="newer posenc"):
        read_study_results(out, (KIND,))
    (out / "results.json").write_text(json.dumps({"kind": "toy", "schema": "x"}))
    with pytest.raises(UserError, match="invalid schema"):
        read_study_results(out, (KIND,))


def test_paths_that_cannot_be_a_study_folder(tmp_path):
    with pytest.raises(UserError, match="must not be empty"):
        RunDirectory("", KIND)
    file = tmp_path / "f"
    file.write_text("x")
    with RunDirectory(file, KIND) as rd, pytest.raises(UserError, match="not a directory"):
        rd.open(_never)
    with pytest.raises(UserError, match="holds no results.json"):
        read_study_results(tmp_path, (KIND,))
