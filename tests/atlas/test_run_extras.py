"""`posenc atlas --run`: the learned position terms and attention maps of a tiny trained run,
from a `posenc train` directory and from runs/<encoding>/seed<k> inside a compare directory."""

from __future__ import annotations

import json

import pytest
import torch

from posenc import LMConfig, TransformerLM, list_encodings
from posenc.atlas.atlas import RUN_IMAGES
from posenc.atlas.run_extras import attention_maps, learned_terms_panel, load_atlas_run, run_panels
from posenc.cli import main
from posenc.encodings import encoding_class, encoding_options
from posenc.train import TrainConfig, train
from posenc.train.checkpoint import LoadedRun
from tests.helpers import make_corpus

TRAIN_LEN = 16


def tiny_run(tmp_path, run_dir, pe):
    model = LMConfig(d_model=32, n_layers=2, n_heads=2, max_len=TRAIN_LEN, d_ff=64, pe=pe)
    cfg = TrainConfig(model=model, data=str(make_corpus(tmp_path / "data")),
                      train_len=TRAIN_LEN, batch_size=4, steps=4, checkpoint_every=4,
                      eval_windows=2, cache_dir=str(tmp_path / "cache"), device="cpu")
    train(cfg, run_dir, progress=False)
    return run_dir


@pytest.fixture(scope="module")
def t5_in_compare_dir(tmp_path_factory):
    """A run laid out like a `posenc compare` output: OUT/runs/t5/seed0."""
    base = tmp_path_factory.mktemp("compare")
    torch.set_num_threads(1)
    return base, tiny_run(base, base / "out" / "runs" / "t5" / "seed0", "t5")


def test_bias_run_gives_per_layer_curves_and_attention_at_l_and_4l(t5_in_compare_dir,
                                                                   tmp_path):
    _, run_dir = t5_in_compare_dir
    loaded = load_atlas_run(run_dir)
    panels = {p.name: p for p in run_panels(loaded, tmp_path)}
    assert set(panels) == {"run_learned_terms", "run_attention"}
    curves = panels["run_learned_terms"].data["bias_per_layer"]
    assert len(curves) == 1 and curves[0].shape == (2, 4 * TRAIN_LEN)   # T5 shares a table
    # the curve is the model's own table, looked up through its buckets
    pe = loaded.model.pe
    from posenc.encodings.t5 import relative_position_bucket
    buckets = relative_position_bucket(-torch.arange(4 * TRAIN_LEN), False, pe.num_buckets,
                                       pe.max_distance)
    torch.testing.assert_close(curves[0], pe.bias.weight.detach()[buckets].T)
    maps = panels["run_attention"].data["maps"]
    assert set(maps) == {str(TRAIN_LEN), str(4 * TRAIN_LEN)}
    for n, entry in maps.items():
        assert len(entry["layers"]) == 2
        layer = entry["layers"][0] * entry["block"] ** 2             # back to row sums
        assert layer.shape[0] * entry["block"] == int(n)
        torch.testing.assert_close(layer.sum(dim=-1), torch.full((layer.shape[0],),
                                                                 float(entry["block"])))
        assert float(layer.triu(1).abs().max()) == 0.0               # causal: nothing ahead
    for name in RUN_IMAGES:
        assert (tmp_path / name).stat().st_size > 10_000
    assert sorted(image for p in panels.values() for image in p.images) == sorted(RUN_IMAGES)


def test_cli_takes_a_run_inside_a_compare_dir_and_explains_the_top_dir(t5_in_compare_dir,
                                                                      tmp_path, capsys,
                                                                      monkeypatch):
    base, run_dir = t5_in_compare_dir
    assert main(["atlas", "--out", str(tmp_path / "a"), "--run", str(base / "out")]) == 2
    err = capsys.readouterr().err
    assert "runs/<encoding>/seed<k>" in err and "t5" in err and err.count("\n") == 1
    assert main(["atlas", "--out", str(tmp_path / "a"), "--run", str(base / "out/runs/t5")]) == 2
    err = capsys.readouterr().err
    assert "pick one of its seeds (seed0)" in err and err.count("\n") == 1
    # the full command on a run: the fifteen panels plus the two of the run (drawing of the
    # fifteen is tested in tests/atlas/test_atlas.py; stub them here to keep this test fast)
    import posenc.atlas.atlas as atlas_module
    from posenc.atlas.figure import Panel

    def stub(name):
        return lambda out_dir: Panel(name, name, "A stub. Two sentences.", [], {"x": 1})

    monkeypatch.setattr(atlas_module, "PANELS", {n: stub(n) for n in atlas_module.PANELS})
    assert main(["atlas", "--out", str(tmp_path / "b"), "--run", str(run_dir),
                 "--quiet"]) == 0
    doc = json.loads((tmp_path / "b" / "atlas.json").read_text())
    assert {"run_learned_terms", "run_attention"} <= set(doc)
    page = (tmp_path / "b" / "index.html").read_text()
    assert 'src="run_attention.png"' in page and 'src="run_learned_terms.png"' in page


def test_learned_table_run_draws_its_vectors_and_notes_4l(tmp_path):
    torch.set_num_threads(1)
    loaded = load_atlas_run(tiny_run(tmp_path, tmp_path / "run", "learned"))
    panels = {p.name: p for p in run_panels(loaded, tmp_path)}
    vectors = panels["run_learned_terms"].data
    assert vectors["positions"] == TRAIN_LEN                   # no vectors past the table
    maps = panels["run_attention"].data["maps"]
    assert "layers" in maps[str(TRAIN_LEN)]
    assert "past learned table" in maps[str(4 * TRAIN_LEN)]["note"]


def test_rope_run_has_no_learned_terms_but_says_so(tmp_path):
    torch.set_num_threads(1)
    loaded = load_atlas_run(tiny_run(tmp_path, tmp_path / "run", "rope"))
    panels = run_panels(loaded, tmp_path)
    assert [p.name for p in panels] == ["run_attention"]
    assert "rope has neither" in panels[0].caption
    found = attention_maps(loaded)
    assert set(found["maps"]) == {str(TRAIN_LEN), str(4 * TRAIN_LEN)}


@pytest.mark.parametrize("name", list_encodings())
def test_every_encoding_gets_its_learned_terms_or_none(name, tmp_path):
    """Untrained tiny models of every encoding: bias encodings give per-layer curves over
    0..4L-1, encodings with an embed hook give position vectors in 2-D, the rest nothing."""
    torch.set_num_threads(1)
    options = {"vocab_size": 64} if "vocab_size" in encoding_options(name) else {}
    cfg = LMConfig(pe=name, d_model=16, n_layers=2, n_heads=2, max_len=TRAIN_LEN, d_ff=32,
                   vocab_size=64, pe_options=options)
    loaded = LoadedRun(model=TransformerLM(cfg).eval(),
                       train_config=TrainConfig(model=cfg, train_len=TRAIN_LEN),
                       tokenizer=None, corpus_info={}, steps=0, tokens_per_s=0.0, log=[])
    panel = learned_terms_panel(loaded, tmp_path)
    cls = encoding_class(name)
    if cls.family == "bias" and not cls.position_free:       # (not the content's bias)
        layers = 2 if cls.per_layer else 1
        assert [tuple(c.shape) for c in panel.data["bias_per_layer"]] == \
            [(2, 4 * TRAIN_LEN)] * layers
    elif cls.overrides("embed"):
        assert panel.data["positions"] in (TRAIN_LEN, 4 * TRAIN_LEN)
        assert panel.data["coords"].shape == (panel.data["positions"], 2)
        assert torch.isfinite(panel.data["coords"]).all()
    else:
        assert panel is None
