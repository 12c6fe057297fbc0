"""Accuracy heat maps: one panel per method on one shared 0..1 scale with one colour bar, the
drawn data equal to the grids given, blank cells where nothing was measured."""

from __future__ import annotations

import math

import numpy as np

from posenc.viz.heatmaps import accuracy_heatmaps, panel_data


def test_each_panel_draws_its_grid_on_one_shared_scale():
    grids = {"none": [[1.0, 0.5], [1.0, 0.0]], "yarn": [[1.0, 1.0], [0.5, math.nan]]}
    fig = accuracy_heatmaps(grids, [64, 128], [0.0, 1.0], "needle", original=64)
    drawn = panel_data(fig)
    assert list(drawn) == ["none", "yarn"]
    assert np.allclose(drawn["none"], grids["none"])
    assert np.allclose(drawn["yarn"][0], [1.0, 1.0]) and math.isnan(drawn["yarn"][1, 1])
    panels = [ax for ax in fig.axes if ax.images]
    assert {ax.images[0].get_clim() for ax in panels} == {(0.0, 1.0)}
    assert len(fig.axes) == len(panels) + 1                # one colour bar for all
    none = panels[0]
    assert [t.get_text() for t in none.texts] == ["100%", "50%", "100%", "0%"]
    assert [t.get_text() for t in panels[1].texts] == ["100%", "100%", "50%"]   # NaN blank
    assert [t.get_text() for t in none.get_xticklabels()] == ["64\n1x", "128\n2x"]
    assert [t.get_text() for t in none.get_yticklabels()] == ["0%", "100%"]
    assert len(none.patches) == 1                           # the original context outlined


def test_many_methods_wrap_into_rows_and_the_figure_grows():
    small = accuracy_heatmaps({"a": [[1.0]]}, [8], [0.5], "t")
    grids = {f"m{i}": np.zeros((11, 4)) for i in range(10)}
    big = accuracy_heatmaps(grids, [8192, 16384, 24576, 32768], [i / 10 for i in range(11)],
                            "t", original=8192)
    assert len(panel_data(big)) == 10
    hidden = [ax for ax in big.axes if not ax.images and not ax.get_visible()]
    assert len(hidden) == 2                                 # 3 rows of 4, two left empty
    w0, h0 = small.get_size_inches()
    w1, h1 = big.get_size_inches()
    assert w1 > 3 * w0 and h1 > 3 * h0
    ticks = [t.get_text() for t in big.axes[0].get_xticklabels()]
    assert ticks == ["8k\n1x", "16k\n2x", "24k\n3x", "32k\n4x"]


def test_a_long_title_wraps_on_a_small_figure_and_the_rows_can_be_named():
    title = "passkey retrieval: a model with a long name, extended from 256 tokens, outlined"
    fig = accuracy_heatmaps({"none": [[1.0]]}, [256], [0.5], title, 256, "key depth")
    shown = fig._suptitle.get_text()
    assert shown.replace("\n", " ") == title and shown.count("\n") >= 1
    assert fig.axes[0].get_ylabel() == "key depth"


def test_the_title_says_how_many_trials_each_cell_holds():
    one = accuracy_heatmaps({"none": [[1.0, 0.0]]}, [64, 128], [0.5], "needle", 64,
                            per_cell=1)
    assert one._suptitle.get_text().replace("\n", " ") == "needle; 1 needle per cell"
    keys = accuracy_heatmaps({"none": [[1.0]]}, [64], [0.5], "passkey", 64, "key depth",
                             per_cell=8, trial="key")
    assert keys._suptitle.get_text().replace("\n", " ").endswith("; 8 keys per cell")
