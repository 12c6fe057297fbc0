"""posenc compare end to end on a tiny preset: results.json, report, plots and atlas, seeds,
growing, resuming after crashes, a run that diverges, a second writer; and the commands that
read the finished comparison (eval, plot) or refuse to overwrite it."""

import json
import math
import shutil

import pytest

from posenc.cli import main
from posenc.lab.compare import study as compare_mod
from posenc.lab.compare.presets import PRESETS
from posenc.lab.compare.study import run_compare
from posenc.train.checkpoint import committed_file

RUN_KEYS = {"encoding", "options", "train_len", "steps", "train_tokens_per_s", "ppl",
            "inference_scaling", "ppl_spread", "spread_kind", "seeds", "label"}
SEED_KEYS = {"seed", "ppl", "ppl_tokens", "window_nll", "window_tokens", "train_tokens_per_s",
             "final_loss", "curve", "entropy", "seconds", "run_dir"}


@pytest.fixture(scope="module")
def corpus_dir(tmp_path_factory):
    """A small folder of text files (several land in the test split)."""
    root = tmp_path_factory.mktemp("corpus")
    words = ["alpha", "beta", "gamma", "delta", "return", "value", "print", "index", "self"]
    for i in range(60):
        lines = [f"def f{i}_{j}({words[j % 9]}, {words[(i + j) % 9]}):\n"
                 f"    return {words[(i * j) % 9]} + {j}\n" for j in range(40)]
        (root / f"doc{i:02d}.py").write_text("".join(lines))
    return root


@pytest.fixture(scope="module", autouse=True)
def cache_env(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("POSENC_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    yield
    mp.undo()


def tiny_config(corpus_dir, **changes):
    cfg = PRESETS["smoke"].with_options(
        encodings=("learned", "rope"), train_len=16, steps=6, batch_size=4, d_model=32,
        n_layers=1, n_heads=2, data=str(corpus_dir), scalings=("yarn:4", "logn"),
        eval_tokens=256, entropy_max_len=32, lengths=(16, 32, 64), timing_rounds=2)
    return cfg.with_options(**changes)


@pytest.fixture(scope="module")
def finished(corpus_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("cmp") / "out"
    outcome = run_compare(tiny_config(corpus_dir), out, progress=False)   # with its atlas
    return out, outcome


def test_results_json_has_the_exact_layout(finished):
    out, outcome = finished
    res = json.loads((out / "results.json").read_text())
    assert set(res) == {"kind", "schema", "config", "corpus", "runs", "baseline", "timing",
                        "execution"}
    assert sorted(res["execution"]) == ["learned/seed0", "rope/seed0"]
    assert all(e["workers"] == 1 and e["threads"] >= 1 for e in res["execution"].values())
    assert (res["kind"], res["schema"]) == ("compare", 1)
    assert set(res["corpus"]) == {"name", "python_version", "sha256", "tokens"}
    assert res["baseline"]["unigram_ppl"] > 1 and res["baseline"]["tokens"] == 256
    assert set(res["timing"]["step_seconds"]) == {"learned", "rope"}
    assert all(len(v) == 2 and min(v) > 0 for v in res["timing"]["step_seconds"].values())
    assert res["config"]["lengths"] == [16, 32, 64] and res["config"]["train"]["steps"] == 6
    assert [(r["encoding"], r["inference_scaling"]) for r in res["runs"]] == [
        ("learned", None), ("rope", None), ("rope", "yarn:4"), ("rope", "logn")]
    for run in res["runs"]:
        assert RUN_KEYS <= set(run)
        assert run["train_len"] == 16 and run["steps"] == 6
        assert run["train_tokens_per_s"] > 0 and isinstance(run["options"], dict)
        assert list(run["ppl"]) == ["16", "32", "64"]
        assert run["spread_kind"] == "bootstrap" and len(run["seeds"]) == 1
        seed = run["seeds"][0]
        assert SEED_KEYS <= set(seed) and seed["seed"] == 0
        assert seed["run_dir"] == f"runs/{run['encoding']}/seed0"
        for n, value in run["ppl"].items():         # the mean of one seed is that seed
            assert value == seed["ppl"][n]
    learned, rope = res["runs"][0], res["runs"][1]
    assert isinstance(learned["ppl"]["16"], float)
    assert learned["ppl"]["32"] == learned["ppl"]["64"] == "n/a (past learned table of 16)"
    assert all(isinstance(v, float) for v in rope["ppl"].values())
    nll, tok = rope["seeds"][0]["window_nll"]["32"], rope["seeds"][0]["window_tokens"]["32"]
    assert len(nll) == 256 // 32 and tok == [31] * len(nll)      # non-overlapping windows
    assert rope["ppl"]["32"] == pytest.approx(math.exp(sum(nll) / len(nll)), rel=1e-4)
    assert all(s > 0 for s in rope["ppl_spread"].values())          # bootstrap spread
    assert res["runs"][2]["ppl"]["64"] != rope["ppl"]["64"]       # scaling changes numbers
    assert res["runs"][3]["ppl"]["16"] == pytest.approx(rope["ppl"]["16"])  # logn: 1 at L
    assert outcome.trained == ("learned/seed0", "rope/seed0")


def test_report_and_plots_are_written(finished):
    out, _ = finished
    report = (out / "report.md").read_text()
    assert "## Published claims, checked on this run" in report
    assert "claims need encodings this comparison did not run: " in report
    assert "n/a (past learned table of 16)" in report
    assert "## Did every model learn?" in report and "Unigram baseline" in report
    index = (out / "index.html").read_text()
    assert '<a href="report.md">' in index
    for name in ("ppl_vs_length.png", "ppl_ratio.png", "training_curves.png",
                 "entropy_vs_length.png"):
        assert (out / name).read_bytes()[:4] == b"\x89PNG"
        assert f"({name})" in report


def test_the_atlas_is_drawn_with_a_trained_run_and_linked(finished):
    out, _ = finished
    atlas = json.loads((out / "atlas" / "atlas.json").read_text())
    assert {"sinusoidal", "t5_buckets", "run_attention", "run_learned_terms"} <= set(atlas)
    assert "runs/learned/seed0" in (out / "atlas" / "index.md").read_text()  # no t5: the first
    assert '<a href="atlas/index.html">' in (out / "index.html").read_text()
    assert "(atlas/index.html)" in (out / "report.md").read_text()


def test_a_diverging_run_is_reported_and_the_others_go_on(corpus_dir, tmp_path, monkeypatch,
                                                           capsys):
    from posenc.train.loop import TrainingDiverged
    real = compare_mod.ensure_trained

    def diverge_alibi(cfg, encoding, *args, **kw):
        if encoding == "alibi":
            raise TrainingDiverged("step 3: loss is nan")
        return real(cfg, encoding, *args, **kw)

    monkeypatch.setattr(compare_mod, "ensure_trained", diverge_alibi)
    out = tmp_path / "out"
    cfg = tiny_config(corpus_dir, encodings=("alibi", "nope"), scalings=(), steps=2)
    outcome = run_compare(cfg, out, progress=False, atlas=False)
    assert outcome.trained == ("nope/seed0",)
    saved = json.loads((out / "results.json").read_text())
    assert saved["failed"] == {"alibi/seed0": "step 3: loss is nan"}
    assert [r["encoding"] for r in saved["runs"]] == ["nope"]
    report = (out / "report.md").read_text()
    assert "## Runs that failed" in report and "`alibi/seed0`: step 3: loss is nan" in report
    monkeypatch.setattr(compare_mod, "ensure_trained", real)      # the retry succeeds
    outcome = run_compare(cfg, out, progress=False, atlas=False)
    assert outcome.trained == ("alibi/seed0",) and "failed" not in json.dumps(
        outcome.results.get("failed") or {})
    assert "Runs that failed" not in (out / "report.md").read_text()


def test_a_second_writer_is_refused(corpus_dir, tmp_path):
    from posenc.runio import DirectoryInUse, DirectoryLock
    out = tmp_path / "out"
    out.mkdir()
    with DirectoryLock(out, "posenc compare"):
        with pytest.raises(DirectoryInUse, match="in use by another process"):
            run_compare(tiny_config(corpus_dir), out, progress=False, atlas=False)
    assert not any(out.iterdir())


def test_rerun_resumes_without_training(finished, corpus_dir):
    out, first = finished
    before = (out / "results.json").read_text()
    again = run_compare(tiny_config(corpus_dir), out, progress=False, atlas=False)
    assert again.trained == () and set(again.reused) == {"learned/seed0", "rope/seed0"}
    assert json.loads(before)["runs"] == again.results["runs"]


def test_resume_after_a_crash_in_evaluation(corpus_dir, tmp_path, monkeypatch):
    out, calls = tmp_path / "out", []
    real = compare_mod.evaluate_run
    cfg = tiny_config(corpus_dir, encodings=("rope",))

    def crashing(*args, **kw):
        calls.append(args[4])                      # the scaling label
        if len(calls) == 2:
            raise RuntimeError("simulated crash")
        return real(*args, **kw)

    monkeypatch.setattr(compare_mod, "evaluate_run", crashing)
    with pytest.raises(RuntimeError, match="simulated"):
        run_compare(cfg, out, progress=False, atlas=False)
    saved = json.loads((out / "results.json").read_text())
    assert [r["inference_scaling"] for r in saved["runs"]] == [None]    # kept on disk
    monkeypatch.setattr(compare_mod, "evaluate_run", real)
    outcome = run_compare(cfg, out, progress=False, atlas=False)
    assert outcome.trained == ()                    # the training had finished
    assert outcome.results["runs"][:1] == saved["runs"]
    assert [r["inference_scaling"] for r in outcome.results["runs"]] == [None, "yarn:4", "logn"]


def test_resume_after_a_crash_in_training(corpus_dir, tmp_path, monkeypatch):
    import posenc.train.loop as loop
    out, real = tmp_path / "out", loop.train

    def crash_at_step_3(cfg, run_dir, **kw):
        def on_step(step, record, model):
            kw["on_step"](step, record, model)
            if step == 3:
                raise RuntimeError("simulated crash")
        return real(cfg, run_dir, **{**kw, "on_step": on_step})

    cfg = tiny_config(corpus_dir, encodings=("rope",), scalings=())
    monkeypatch.setattr(loop, "train", crash_at_step_3)
    with pytest.raises(RuntimeError, match="simulated"):
        run_compare(cfg, out, progress=False, atlas=False)
    assert json.loads((out / "runs/rope/seed0/state.json").read_text())["step"] == 3
    monkeypatch.setattr(loop, "train", real)
    outcome = run_compare(cfg, out, progress=False, atlas=False)
    assert outcome.trained == ("rope/seed0",)
    log = [json.loads(line) for line in
           (out / "runs/rope/seed0/log.jsonl").read_text().splitlines()]
    steps = [r["step"] for r in log if "loss" in r]
    assert steps == [1, 2, 3, 4, 5, 6]              # resumed at 4, not restarted


def test_a_different_comparison_is_refused_and_kept(finished, corpus_dir):
    out, _ = finished
    before = (out / "results.json").read_bytes()
    with pytest.raises(ValueError, match="comparison whose settings differ.*steps"):
        run_compare(tiny_config(corpus_dir, steps=7), out, progress=False, atlas=False)
    assert (out / "results.json").read_bytes() == before


def cli(capsys, *argv):
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_cli_compare_refuses_bad_output_dirs(finished, tmp_path, capsys, corpus_dir):
    out, _ = finished
    before = (out / "results.json").read_bytes()
    code, _, err = cli(capsys, "compare", "--out", str(out), "--preset", "smoke",
                       "--no-progress")
    assert code == 2 and "holds a comparison whose settings differ" in err
    assert "pass --overwrite" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1 and (out / "results.json").read_bytes() == before
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    code, _, err = cli(capsys, "compare", "--out", str(other), "--preset", "smoke")
    assert code == 2 and "is not empty and holds no comparison" in err
    assert sorted(p.name for p in other.iterdir()) == ["notes.txt"]
    code, _, err = cli(capsys, "compare", "--out", str(tmp_path / "x"), "--encodings",
                       "rope,warp")
    assert code == 2 and "unknown encoding(s) warp" in err


def test_cli_eval_prints_a_table_and_writes_json(finished, capsys):
    out, _ = finished
    code, text, _ = cli(capsys, "eval", str(out / "runs/rope/seed0"), "--lengths", "16,32",
                        "--rope-scaling", "yarn:4", "--entropy", "--task", "copy",
                        "--task-examples", "4")
    assert code == 0 and "perplexity" in text and "exact match" in text
    saved = json.loads(next((out / "runs/rope/seed0").glob("eval-yarn4-*.json")).read_text())
    assert saved["inference_scaling"] == "yarn:4" and set(saved["ppl"]) == {"16", "32"}
    assert set(saved["task_accuracy"]) == {"16", "32"}


@pytest.mark.parametrize("case", ["missing", "not_a_run", "corrupt", "past_table",
                                  "rope_scaling_on_learned"])
def test_cli_eval_bad_input_is_one_line(finished, tmp_path, capsys, case):
    out, _ = finished
    run = out / "runs/learned/seed0"
    argv = ["eval", str(run), "--lengths", "16"]
    expected = {"missing": "does not exist", "not_a_run": "holds no run",
                "corrupt": "corrupt checkpoint", "past_table": "past the learned position",
                "rope_scaling_on_learned": "needs a RoPE run"}[case]
    if case == "missing":
        argv[1] = str(tmp_path / "nope")
    elif case == "not_a_run":
        argv[1] = str(tmp_path)
    elif case == "corrupt":
        broken = tmp_path / "broken"
        shutil.copytree(run, broken)
        weights = committed_file(broken)
        weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
        argv[1] = str(broken)
    elif case == "past_table":
        argv[3] = "16,64"
    else:
        argv += ["--rope-scaling", "ntk:4"]
    before = sorted(p.name for p in run.iterdir())
    code, _, err = cli(capsys, *argv)
    assert code == 2, err
    assert expected in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert sorted(p.name for p in run.iterdir()) == before           # nothing written


def _trained_runs(out):
    return sorted(str(p.parent.relative_to(out / "runs")) for p in
                  (out / "runs").glob("*/seed*/state.json"))


def test_seeds_are_kept_with_mean_and_spread(corpus_dir, tmp_path):
    out = tmp_path / "out"
    cfg = tiny_config(corpus_dir, encodings=("rope",), scalings=(), seeds=2,
                      entropy_max_len=0, timing_rounds=0)
    outcome = run_compare(cfg, out, progress=False, atlas=False)
    assert outcome.trained == ("rope/seed0", "rope/seed1")
    (run,) = json.loads((out / "results.json").read_text())["runs"]
    assert [s["seed"] for s in run["seeds"]] == [0, 1] and run["spread_kind"] == "seeds"
    for n in ("16", "32", "64"):
        a, b = (s["ppl"][n] for s in run["seeds"])
        assert a != b                                   # seeds change data order and init
        assert run["ppl"][n] == pytest.approx((a + b) / 2)
        assert run["ppl_spread"][n] == pytest.approx(abs(a - b) / math.sqrt(2))
    report = (out / "report.md").read_text()
    assert "standard deviation over 2 seeds" in report and " ± " in report


def test_growing_trains_only_what_is_missing(corpus_dir, tmp_path):
    out = tmp_path / "out"
    base = tiny_config(corpus_dir, encodings=("rope",), scalings=("logn",),
                       entropy_max_len=0, timing_rounds=0)
    run_compare(base, out, progress=False, atlas=False)
    first = json.loads((out / "results.json").read_text())["runs"]
    grown = run_compare(base.with_options(encodings=("alibi",), seeds=2), out, progress=False,
                        atlas=False)
    assert grown.trained == ("alibi/seed0", "rope/seed1", "alibi/seed1")
    assert _trained_runs(out) == ["alibi/seed0", "alibi/seed1", "rope/seed0", "rope/seed1"]
    res = json.loads((out / "results.json").read_text())
    assert res["config"]["encodings"] == ["rope", "alibi"] and res["config"]["seeds"] == 2
    assert [r["label"] for r in res["runs"]] == ["rope", "rope+logn", "alibi"]
    assert res["runs"][0]["seeds"][0] == first[0]["seeds"][0]       # seed 0 reused as is
    again = run_compare(base.with_options(encodings=("rope", "alibi"), seeds=2), out, atlas=False,
                        progress=False)
    assert again.trained == ()


def test_an_incomparable_change_is_refused_with_the_reason(corpus_dir, tmp_path, capsys):
    out = tmp_path / "out"
    base = tiny_config(corpus_dir, encodings=("rope",), scalings=(), entropy_max_len=0,
                       timing_rounds=0)
    run_compare(base, out, progress=False, atlas=False)
    before = (out / "results.json").read_bytes()
    with pytest.raises(ValueError, match="lr is 0.003 there but 0.001 now"):
        run_compare(base.with_options(lr=1e-3, encodings=("alibi",)), out, progress=False,
                    atlas=False)
    with pytest.raises(ValueError, match="options of rope"):
        run_compare(base.with_options(pe_options={"rope": {"theta": 500.0}}), out,
                    progress=False)
    assert (out / "results.json").read_bytes() == before
    assert _trained_runs(out) == ["rope/seed0"]


def test_cli_plot_redraws_a_comparison(finished, capsys):
    out, _ = finished
    png = out / "ppl_vs_length.png"
    png.unlink()
    (out / "report.md").write_text("stale")
    results_before = (out / "results.json").read_bytes()
    code, text, err = cli(capsys, "plot", str(out))
    assert code == 0, err
    assert png.read_bytes()[:4] == b"\x89PNG" and "wrote" in text
    assert "## Ranking" in (out / "report.md").read_text()
    assert (out / "results.json").read_bytes() == results_before


def test_the_corpus_is_loaded_once_per_comparison(corpus_dir, tmp_path, monkeypatch):
    import posenc.data.batches as batches
    import posenc.data.corpora as corpora
    import posenc.lab.compare.study_data as study_data
    real, loads = corpora.load_corpus, []

    def counted(spec=None):
        loads.append(spec)
        return real(spec)
    for module in (corpora, batches, study_data):      # every name it is called by
        monkeypatch.setattr(module, "load_corpus", counted)
    cfg = tiny_config(corpus_dir, encodings=("rope", "alibi"), scalings=(), steps=2,
                      entropy_max_len=0, timing_rounds=0)
    outcome = run_compare(cfg, tmp_path / "out", progress=False, atlas=False)
    assert outcome.trained == ("rope/seed0", "alibi/seed0")
    assert loads == [str(corpus_dir)]
