"""The run directory: refusals in one line, typed results, overwrite that spares the user."""

from __future__ import annotations

import json

import pytest

from posenc.errors import UserError
from posenc.runio import LOCK_FILE, DirectoryInUse
from posenc.study import CLI_NAMES, RunDirectory, StudyKind, read_study_results

KIND = StudyKind("toy", 2, "posenc toy", ("results.json", "report.md", "runs/*/seed*",
                                           "atlas/*.png"),
                 legacy=lambda d: {"config", "runs"} <= set(d),
                 migrate=lambda d, schema: {**d, "migrated_from": schema})
OTHER = StudyKind("other", 1, "posenc other", ("results.json",))


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


def test_overwrite_removes_only_declared_outputs(tmp_path):
    out = _claimed(tmp_path / "s")
    for rel in ("runs/rope/seed0/model.bin", "runs/rope/notes.txt", "runs/mine/keep.txt",
                "atlas/a.png", "atlas/mine.txt", "report.md", "mine.txt"):
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_text("x")
    with RunDirectory(out, KIND) as rd:
        assert rd.open(_never, overwrite=True) is None
        rd.claim(overwrite=True)
    left = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    assert left == ["atlas/mine.txt", "mine.txt", "runs/mine/keep.txt", "runs/rope/notes.txt"]


def test_claim_removes_stale_temporaries_in_output_folders(tmp_path):
    out = _claimed(tmp_path / "s")
    (out / "atlas").mkdir()
    stale = [out / ".results.json.abcd1234.tmp", out / "atlas" / ".a.png.x_yz7890.tmp"]
    for p in stale:
        p.write_text("half")
    with RunDirectory(out, KIND) as rd:
        rd.open(_never)
        rd.claim()
    assert not any(p.exists() for p in stale)


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
