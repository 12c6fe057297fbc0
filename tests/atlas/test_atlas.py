"""The whole atlas: sixteen panels, >= 16 PNGs, atlas.json with the library's numbers, index.html
and index.md that reference every figure, the CLI, and the page rendered by Chromium."""

from __future__ import annotations

import json
import re

import pytest
import torch

from posenc.atlas import PANELS, atlas_files, write_atlas
from posenc.cli import main
from posenc.encodings.alibi import alibi_slopes
from posenc.encodings.t5 import relative_position_bucket
from tests.helpers import chromium_or_skip, run_headless

ISSUE_PANELS = {"sinusoidal", "rope_decay", "rope_scaling_wavelengths", "rope_scaling_scores",
                "alibi", "t5_buckets", "distance_biases", "relative_clipping",
                "absolute_trajectories", "logn",
                "p_rope", "mrope_grid", "cope_positions", "path_transform", "window_mask",
                "layer_plan", "stick_breaking"}
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def atlas(tmp_path_factory):
    out = tmp_path_factory.mktemp("atlas")
    torch.set_num_threads(1)
    seen = []
    result = write_atlas(out, progress=seen.append)
    return out, result, seen


def test_every_panel_is_drawn_with_its_numbers(atlas):
    out, result, seen = atlas
    assert set(PANELS) == ISSUE_PANELS
    assert seen == list(PANELS)
    doc = json.loads((out / "atlas.json").read_text())
    assert set(doc) == ISSUE_PANELS
    for name, data in doc.items():
        assert isinstance(data, dict) and data, name
    pngs = sorted(p.name for p in out.glob("*.png"))
    assert len(pngs) >= 16
    assert sorted(result["images"]) == pngs
    for name in pngs:
        assert (out / name).read_bytes()[:8] == PNG_MAGIC
        assert (out / name).stat().st_size > 20_000, name        # a real figure, not a stub


def test_json_holds_the_library_functions_output(atlas):
    out, _, _ = atlas
    doc = json.loads((out / "atlas.json").read_text())
    t5 = doc["t5_buckets"]
    rel = torch.tensor(t5["relative_position"])
    assert t5["decoder"] == relative_position_bucket(rel, False, 32, 128).tolist()
    assert t5["encoder"] == relative_position_bucket(rel, True, 32, 128).tolist()
    for n, slopes in doc["alibi"]["slopes"].items():
        torch.testing.assert_close(torch.tensor(slopes), alibi_slopes(int(n)), rtol=1e-4,
                                   atol=0)
    assert doc["alibi"]["slopes"]["8"][0] == pytest.approx(2 ** -1, rel=1e-4)
    bound = doc["rope_decay"]["relative_bound"]["10000"]
    assert bound[0] == pytest.approx(32.5, rel=1e-4) and max(bound) == bound[0]
    for name in ("absolute_trajectories",):
        for item in doc[name]["trajectories"].values():
            assert len(item["coords"]) == item["positions"]


def test_index_pages_reference_every_figure_and_stay_offline(atlas):
    out, _, _ = atlas
    pngs = {p.name for p in out.glob("*.png")}
    page = (out / "index.html").read_text()
    md = (out / "index.md").read_text()
    assert set(re.findall(r'<img src="([^"]+)"', page)) == pngs
    assert set(re.findall(r"!\[[^\]]*\]\(([^)]+)\)", md)) == pngs
    assert not re.search(r"(src|href)=\"(https?:|//)", page)      # nothing fetched online
    assert "<script" not in page
    for name in PANELS:
        assert f'id="{name}"' in page
    captions = re.findall(r'<p class="caption">(.*?)</p>', page, flags=re.S)
    assert len(captions) == len(PANELS)


def test_cli_refuses_to_clobber(atlas, capsys, tmp_path):
    out, _, _ = atlas
    assert main(["atlas", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("posenc atlas: error: ") and "--overwrite" in err
    assert err.count("\n") == 1
    assert main(["atlas", "--out", str(out / "missing"), "--run",
                 str(out / "no-such-run")]) == 2
    assert "does not exist" in capsys.readouterr().err
    mine = tmp_path / "site"
    mine.mkdir()
    (mine / "index.html").write_text("someone else's page")
    assert main(["atlas", "--out", str(mine)]) == 2
    assert "index.html" in capsys.readouterr().err
    assert (mine / "index.html").read_text() == "someone else's page"
    assert {p.name for p in out.iterdir()} <= set(atlas_files())



def test_index_html_renders_in_chromium(atlas, tmp_path):
    out, _, _ = atlas
    browser = chromium_or_skip()
    shot = tmp_path / "page.png"
    height = 14000
    run_headless(browser, tmp_path, "--hide-scrollbars", f"--screenshot={shot}",
                 f"--window-size=1400,{height}", (out / "index.html").as_uri(), timeout=120)
    from PIL import Image
    image = Image.open(shot).convert("L")
    width, got_height = image.size
    assert (width, got_height) == (1400, height)
    # the figures are drawn: the page runs for thousands of pixels (sixteen figures, one under
    # another) and nearly every horizontal band down to its end holds non-white pixels
    bands = [image.crop((0, y, width, y + 300)).getextrema()[0] < 200
             for y in range(0, height - 300, 300)]
    last = max(i for i, inked in enumerate(bands) if inked)
    assert last * 300 > 7000
    assert sum(bands[:last + 1]) >= 0.8 * (last + 1)


def test_every_caption_is_two_sentences(atlas):
    out, _, _ = atlas
    sections = (out / "index.md").read_text().split("\n## ")[1:]
    assert len(sections) == len(PANELS)
    for section in sections:
        caption = [line for line in section.splitlines()[1:]
                   if line and not line.startswith("![")][0]
        text = re.sub(r" \(numbers: .*\)$", "", caption).replace("et al.", "et al")
        assert len(re.findall(r"[.!?](?:\s|$)", text)) == 2, caption
