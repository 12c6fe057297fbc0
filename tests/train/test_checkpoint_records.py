"""What a checkpoint records is checked on every load: the sha256 of its files against its
manifest (even when state.json lists none), the folder state.json names (never outside the
run), and the model settings (a config.json edited by hand is refused). Its files follow the
umask, and a failed write is one OSError naming the file, the previous checkpoint intact."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from posenc.errors import UserError
from posenc.runio import dir_mode, file_mode
from posenc.train import load_run, train
from posenc.train.checkpoint import committed_file, read_progress
from tests.train.helpers import tiny

pytestmark = pytest.mark.usefixtures("single_thread")


@pytest.fixture(scope="module")
def alibi_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("alibi")
    train(tiny(root, model={"pe": "alibi"}, steps=3), root / "run", progress=False)
    return root / "run"


@pytest.fixture
def run(alibi_run, tmp_path):
    """A copy of the trained run to tamper with."""
    return shutil.copytree(alibi_run, tmp_path / "run")


def edit_json(path, change):
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc))


def test_an_edited_config_is_refused(run):
    assert load_run(run).train_config.model.pe == "alibi"
    edit_json(run / "config.json", lambda d: d["train"]["model"].pop("pe"))
    with pytest.raises(UserError, match=r"does not match the model its checkpoint was written "
                                        r"with: pe 'rope' \(checkpoint: 'alibi'\)"):
        load_run(run)
    edit_json(run / "config.json", lambda d: d["train"]["model"].update(pe="alibi",
                                                                        n_heads=1))
    with pytest.raises(UserError, match="n_heads 1 .checkpoint: 2."):
        load_run(run)
    edit_json(run / "config.json", lambda d: d["train"]["model"].update(n_heads=2,
                                                                        attn_backend="sdpa"))
    assert load_run(run).train_config.model.attn_backend == "sdpa"   # changes no weights


def test_weights_are_checked_against_the_manifest_without_files_in_state_json(run):
    edit_json(run / "state.json", lambda d: d.pop("files"))
    weights = committed_file(run)
    raw = bytearray(weights.read_bytes())
    raw[-1] ^= 0x01                                        # one bit of the last tensor
    weights.write_bytes(bytes(raw))
    with pytest.raises(UserError, match=r"model\.safetensors: sha256 .* differs"):
        load_run(run)
    (weights.parent / "manifest.json").unlink()
    with pytest.raises(UserError, match=r"manifest\.json: the file is missing"):
        load_run(run)


def test_state_json_and_manifest_must_agree(run):
    edit_json(run / "state.json", lambda d: d["files"].update({"model.safetensors": "0" * 64}))
    with pytest.raises(UserError, match="record different sha256"):
        load_run(run)


@pytest.mark.parametrize("name", ["../../../etc", "/etc", "checkpoints/../..", "checkpoints",
                                  "checkpoints/step-1/../../checkpoints/x/y"])
def test_a_checkpoint_outside_the_run_is_refused(run, name):
    edit_json(run / "state.json", lambda d: d.update(checkpoint=name))
    with pytest.raises(UserError, match="is not a folder of checkpoints/"):
        load_run(run)


def test_checkpoint_files_follow_the_umask(run):
    folder = committed_file(run).parent
    modes = {p.name: p.stat().st_mode & 0o777 for p in [*folder.iterdir(), run / "config.json"]}
    assert modes == dict.fromkeys(["model.safetensors", "state.pt", "manifest.json",
                                   "config.json"], file_mode())
    assert folder.stat().st_mode & 0o777 == dir_mode()


def test_a_failed_checkpoint_write_is_one_oserror_and_keeps_the_last(tmp_path, monkeypatch):
    cfg = tiny(tmp_path, steps=6, checkpoint_every=3)
    real_save = torch.save

    def full_disk(obj, f, *args, **kwargs):
        if obj.get("step") == 6:
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos "
                               "576 vs 470\nframe #0: c10::ThrowEnforceNotMet")
        return real_save(obj, f, *args, **kwargs)

    monkeypatch.setattr(torch, "save", full_disk)
    with pytest.raises(OSError) as err:
        train(cfg, tmp_path / "run", progress=False)
    text = str(err.value)
    assert text.startswith("cannot write checkpoint file ") and "\n" not in text, text
    assert "state.pt: [enforce fail" in text and "disk full" in text
    assert read_progress(tmp_path / "run")["step"] == 3
    assert load_run(tmp_path / "run").steps == 3
    assert [p.name for p in (tmp_path / "run" / "checkpoints").iterdir()] == ["step-00000003"]
    monkeypatch.setattr(torch, "save", real_save)
    assert train(cfg, tmp_path / "run", progress=False).steps == 6
