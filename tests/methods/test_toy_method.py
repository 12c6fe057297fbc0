"""Adding a method is one file: a toy region method registered here (nowhere else) appears in
``posenc list``, in a comparison's inference-time runs and report, and in ``posenc extend``
and ``posenc arena`` with their reports, each citing its source."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest
import torch

pytest.importorskip("transformers")

from posenc.cli import main  # noqa: E402
from posenc.methods import Citation, Option, list_methods, register_method, unregister_method  # noqa: E402
from posenc.methods.regions import Region, RegionMethod, distance  # noqa: E402
from tests.helpers import make_corpus  # noqa: E402
from tests.hf.helpers import save_tiny_model  # noqa: E402

CITE = "Toymaker et al. 2031"


@dataclass(frozen=True)
class ToyClip(RegionMethod):
    """Relative positions exact below ``window``, ``window`` beyond (ReRoPE's map, written
    again here as a stranger's plug-in would be)."""

    name = "toy_clip"
    summary = "relative positions clipped at a window"
    citation = Citation("Toymaker et al.", 2031, "A Toy Clip", "Proc. Tests", "Sec. 2")
    hf_config_loss = "the toy clip"
    options = (Option("window", "the clip", lambda original, factor, _: max(1, original // 2)),)
    reads_factor = False
    window: int

    def longest_relative(self, length: int) -> float:
        return min(length - 1, self.window)

    def regions(self, q_pos, k_pos):
        d = distance(q_pos, k_pos)
        return [Region("near", (d >= 0) & (d < self.window), q_pos, k_pos),
                Region("far", d >= self.window, torch.full_like(q_pos, self.window),
                       torch.zeros_like(k_pos))]


@pytest.fixture(scope="module", autouse=True)
def toy():
    register_method(ToyClip)
    yield
    unregister_method("toy_clip")


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return save_tiny_model(tmp_path_factory.mktemp("tiny") / "llama")


def test_list_shows_the_toy_with_its_source(capsys):
    assert "toy_clip" in list_methods("region")
    assert main(["list"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("toy_clip"))
    assert "region" in line and CITE in line


def test_a_comparison_evaluates_and_cites_the_toy(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("POSENC_CACHE_DIR", str(tmp_path / "cache"))
    out = tmp_path / "cmp"
    code = main(["compare", "--out", str(out), "--encodings", "rope", "--data",
                 str(make_corpus(tmp_path / "corpus").resolve()), "--preset", "smoke",
                 "--scalings", "toy_clip", "--steps", "2", "--lengths", "16,32",
                 "--eval-tokens", "64", "--workers", "1", "--no-atlas", "--no-progress"])
    assert code == 0, capsys.readouterr().err
    runs = json.loads((out / "results.json").read_text())["runs"]
    toy = [r for r in runs if r.get("inference_scaling") == "toy_clip"]
    assert len(toy) == 1 and toy[0]["ppl"]
    report = (out / "report.md").read_text()
    assert "rope+toy_clip" in report and CITE in report


def test_extend_and_arena_run_and_cite_the_toy(tiny_dir, tmp_path, capsys):
    data = tiny_dir.parent / "data.txt"
    out = tmp_path / "extend"
    assert main(["extend", str(tiny_dir), "--preset", "gpu", "--methods", "none,toy_clip",
                 "--lengths", "192",
                 "--eval-windows", "1", "--data", str(data), "--out", str(out),
                 "--no-progress"]) == 0, capsys.readouterr().err
    results = json.loads((out / "results.json").read_text())
    assert results["methods"]["toy_clip"]["extension"]["attention"] == {
        "window": 64, "name": "toy_clip"}                       # native 128 / 2
    assert CITE in (out / "report.md").read_text()
    arena = tmp_path / "arena"
    assert main(["arena", str(tiny_dir), "--text", str(data), "--methods", "none,toy_clip",
                 "--factor", "2", "--original-length", "256", "--depths", "0.5",
                 "--needles", "1", "--passkey-trials", "1", "--eval-windows", "2",
                 "--tasks", "none", "--out",
                 str(arena), "--no-progress", "--device", "cpu"]) == 0, \
        capsys.readouterr().err
    assert json.loads((arena / "results.json").read_text())["methods"] == ["none", "toy_clip"]
    assert CITE in (arena / "report.md").read_text()
