"""report.md, the claims check and the plots, from hand-made results.json dicts."""

import copy
import math

import pytest

from posenc.lab.claims import check_claims
from posenc.lab.presets import CompareConfig
from posenc.lab.report import render_report, write_report
from posenc.viz.plots import plot_all

L = 64
LENGTHS = (64, 128, 256, 512, 1024)


def run(encoding, ppl, scaling=None, tps=20000.0, entropy=None):
    entry = {"encoding": encoding, "options": {}, "train_len": L, "steps": 100,
             "train_tokens_per_s": tps, "ppl": dict(zip(map(str, LENGTHS), ppl)),
             "inference_scaling": scaling}
    if entropy is not None:
        entry["entropy"] = {str(n): {"mean": e - 0.2, "tail": e, "per_layer": [e],
                                     "uniform_tail": math.log(n), "n_windows": 1, "note": None}
                            for n, e in zip(LENGTHS, entropy)}
    if scaling is None:
        entry["curve"] = [[s, 5.0 - s / 50] for s in range(0, 101, 10)]
    return entry


def results(**changes):
    runs = [
        run("learned", [5.5] + ["n/a (past learned table of 64)"] * 4),
        run("sinusoidal", [5.6, 30, 200, 900, 3000], tps=26000),
        run("rope", [5.2, 6.5, 9, 14, 22], tps=25000, entropy=[2.0, 2.3, 2.6, 2.8, 3.0]),
        run("rope", [7, 7.5, 8, 15, 25], "linear:4"),
        run("rope", [5.3, 5.6, 6.1, 9, 16], "ntk:4"),
        run("rope", [5.2, 5.5, 6.0, 8, 12], "dynamic"),
        run("rope", [5.3, 5.5, 5.9, 8.5, 14], "yarn:4"),
        run("rope", [5.2, 6.2, 8.5, 13, 20], "logn", entropy=[2.0, 2.2, 2.4, 2.5, 2.6]),
        run("alibi", [5.4, 5.3, 5.25, 5.25, 5.26], tps=27000,
            entropy=[1.5, 1.6, 1.6, 1.6, 1.6]),
        run("t5", [5.3, 5.3, 5.4, 5.6, 5.9], tps=21000),
    ]
    cfg = CompareConfig(encodings=("learned", "sinusoidal", "rope", "alibi", "t5"),
                        train_len=L, steps=100)
    out = {"config": cfg.to_dict(),
           "corpus": {"name": "stdlib", "python_version": "3.11", "sha256": "ab" * 32},
           "runs": runs}
    out.update(changes)
    return out


def verdicts(res):
    return {v.claim: v for v in check_claims(res)}


def test_claims_follow_the_numbers():
    v = verdicts(results())
    assert v["ALiBi extrapolates better than RoPE"].verdict == "supported"
    assert v["Learned and sinusoidal absolute positions do not extrapolate"].verdict \
        == "supported"
    assert v["Direct extrapolation (plain RoPE past its training length) is poor"].verdict \
        == "supported"
    assert v["RoPE handles texts longer than its training length well"].verdict \
        == "not supported"
    assert v["log n scaling helps"].verdict == "supported"
    assert v["Attention entropy grows with length"].verdict == "supported"
    assert v["log n scaling counters the entropy growth"].verdict == "supported"
    assert "512" in v["ALiBi extrapolates better than RoPE"].rule     # P = 8L
    assert "alibi 0.972" in v["ALiBi extrapolates better than RoPE"].evidence


def test_claims_flip_when_the_numbers_do():
    res = results()
    alibi = next(r for r in res["runs"] if r["encoding"] == "alibi")
    alibi["ppl"]["512"] = 100.0                     # ALiBi now degrades more than RoPE at 8L
    logn = next(r for r in res["runs"] if r.get("inference_scaling") == "logn")
    logn["ppl"]["512"] = 14.1                       # and log n no longer helps, barely
    v = verdicts(res)
    assert v["ALiBi extrapolates better than RoPE"].verdict == "not supported"
    assert v["log n scaling helps"].verdict == "not supported"
    assert "weak" in v["log n scaling helps"].evidence


def test_missing_runs_are_not_tested():
    res = results(runs=[r for r in results()["runs"] if r["encoding"] != "alibi"])
    v = verdicts(res)
    assert v["ALiBi extrapolates better than RoPE"].verdict == "not tested"
    assert "alibi" in v["ALiBi extrapolates better than RoPE"].evidence


def test_report_has_tables_ranking_claims_and_paper_comparison():
    text = render_report(results(), ["ppl_vs_length.png"])
    for heading in ("## Perplexity against evaluation length", "## Ranking",
                    "## The seed notes' claims, checked on this run",
                    "## Compared with the ALiBi paper", "## Attention entropy against length",
                    "## Training", "![ppl_vs_length](ppl_vs_length.png)"):
        assert heading in text
    ranking = text.split("## Ranking")[1].split("##")[0]
    rows = [line for line in ranking.splitlines() if line.startswith("| ") and "rank" not in line]
    assert rows[0].startswith("| 1 | alibi") and rows[-1].split("|")[2].strip() == "learned"
    assert "n/a (past learned table of 64)" in text
    assert "6 of 6 pairs are ordered as in the paper" in text


def test_partial_report_says_so(tmp_path):
    res = results()
    res["runs"] = res["runs"][:2]
    path = write_report(res, tmp_path)
    assert "Partial report: 2 of 10 runs finished" in path.read_text()


def test_plots_are_written_as_png(tmp_path):
    res = copy.deepcopy(results())
    res["runs"][1]["ppl"]["1024"] = "inf"
    paths = plot_all(res, tmp_path)
    assert {p.name for p in paths} == {"ppl_vs_length.png", "training_curves.png",
                                       "entropy_vs_length.png"}
    for p in paths:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 10_000


@pytest.mark.parametrize("bad", ["train_len", "encodings"])
def test_compare_config_validates(bad):
    with pytest.raises(ValueError, match=bad):
        CompareConfig(**{bad: 1 if bad == "train_len" else ("warp",)})
