"""The comparison plots draw the data they are given, readably (checked on the Figure)."""

import math

import matplotlib.pyplot as plt
import pytest

from posenc.viz.axes import coinciding, format_ppl
from posenc.viz.plots import (
    PPL_AXIS_CAP,
    draw_entropy_vs_length,
    draw_ppl_ratio,
    draw_ppl_vs_length,
    draw_training_curves,
    plot_all,
    ratio_points,
)
from posenc.viz.ratio_plot import ppl_at_lengths
from tests.lab.helpers import LENGTHS, results


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _lines(ax):
    """legend label -> (xs, ys) of every labelled line of an axes."""
    return {line.get_label(): (list(line.get_xdata()), list(line.get_ydata()))
            for line in ax.get_lines() if not line.get_label().startswith("_")}


def _axes(fig):
    return {ax.get_title(): ax for ax in fig.axes if ax.get_visible()}


def test_ppl_panels_hold_each_family_with_the_numbers_drawn():
    res = results()
    axes = _axes(draw_ppl_vs_length(res))
    assert set(axes) == {"absolute positions", "rotary", "distance biases",
                         "rope + inference-time scaling (no retraining)"}
    rope = next(r for r in res["runs"] if r["label"] == "rope")
    xs, ys = _lines(axes["rotary"])["rope"]
    assert xs == list(LENGTHS) and ys == pytest.approx([rope["ppl"][str(n)] for n in LENGTHS])
    scaled = _lines(axes["rope + inference-time scaling (no retraining)"])
    assert {"rope", "rope + yarn:4", "rope + logn", "rope + linear:4"} <= set(scaled)
    assert axes["rotary"].get_xticks().tolist() == list(LENGTHS)
    assert [t.get_text() for t in axes["rotary"].get_xticklabels()][:2] == ["64\n(L)",
                                                                          "128\n(2L)"]


def test_values_off_the_axis_are_capped_and_labelled():
    axes = _axes(draw_ppl_vs_length(results()))
    ax = axes["absolute positions"]
    top = ax.get_ylim()[1]
    xs, ys = _lines(ax)["sinusoidal"]
    cap = PPL_AXIS_CAP * 5.3                           # 30 x the median ppl at L
    assert max(ys) == pytest.approx(cap) and top >= cap
    labels = {a.get_text() for a in ax.texts}
    assert {"200", "900", "3,000"} <= labels          # the true values, at the edge
    assert "learned (n/a from 128)" in _lines(ax)


def test_every_log_axis_has_several_labelled_ticks():
    for fig in (draw_ppl_vs_length(results()), draw_ppl_ratio(results())):
        for ax in fig.axes:
            if not ax.get_visible():
                continue
            axis = ax.yaxis if ax.get_yscale() == "log" else ax.xaxis
            if axis.get_scale() != "log":
                continue
            labels = [t.get_text() for t in axis.get_ticklabels() if t.get_text()]
            lo, hi = sorted(ax.get_ylim() if axis is ax.yaxis else ax.get_xlim())
            inside = [t for t in axis.get_ticklocs() if lo <= t <= hi]
            assert len(inside) >= 4 and len(labels) >= 4, (ax.get_title(), labels)


def test_bands_show_the_seed_spread():
    res = results(seeds=(0, 1, 2), spread=0.1)
    ax = _axes(draw_ppl_vs_length(res))["rotary"]
    (band,) = [c for c in ax.collections if len(c.get_paths())]
    ys = band.get_paths()[0].vertices[:, 1]
    rope = next(r for r in res["runs"] if r["label"] == "rope")
    assert max(ys) == pytest.approx(rope["ppl"]["1024"] + rope["ppl_spread"]["1024"])
    assert rope["ppl_spread"]["1024"] == pytest.approx(22.0 * 0.1)


def test_coinciding_lines_are_named_in_the_legend():
    res = results()
    t5 = next(r for r in res["runs"] if r["label"] == "t5")
    alibi = next(r for r in res["runs"] if r["label"] == "alibi")
    t5["ppl"] = dict(alibi["ppl"])
    labels = set(_lines(_axes(draw_ppl_vs_length(res))["distance biases"]))
    assert labels == {"alibi", "t5 (same as alibi)"}
    assert coinciding({"a": [1.0, 2.0], "b": [1.2, 2.0]}) == {}


def test_ratio_plot_draws_every_run_sorted_with_error_bars():
    res = results(seeds=(0, 1, 2), spread=0.1)
    res["runs"][2]["seeds"][1]["ppl"]["512"] *= 1.5      # rope seed 1 degrades more
    pts = ratio_points(res)
    measured = [p for p in pts if p[1] is not None]
    assert [p[1] for p in measured] == sorted(p[1] for p in measured)
    assert pts[-1][0] == "learned" and pts[-1][3].startswith("n/a")
    rope = next(p for p in pts if p[0] == "rope")
    per_seed = [s["ppl"]["512"] / s["ppl"]["64"] for s in res["runs"][2]["seeds"]]
    assert rope[1] == pytest.approx(sum(per_seed) / 3) and rope[2] > 0.1
    ax = draw_ppl_ratio(res).axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == [p[0] for p in pts]   # top down
    drawn = sorted(line.get_xdata()[0] for line in ax.get_lines()
                   if line.get_marker() == "o")
    assert drawn == pytest.approx(sorted(p[1] for p in measured))


def test_training_curves_have_integer_steps_and_fit_the_data():
    fig = draw_training_curves(results(seeds=(0, 1)))
    for ax in fig.axes:
        if not ax.get_visible():
            continue
        assert ax.get_xlim() == (0, 100)
        assert all(float(t).is_integer() for t in ax.get_xticks())
        assert ax.collections                                   # range over seeds
    rope = _lines(_axes(fig)["rotary"])["rope"]
    assert rope[0][0] == 0 and rope[0][-1] == 100


def test_entropy_plot_draws_tail_entropy_and_uniform():
    fig = draw_entropy_vs_length(results())
    ax = _axes(fig)["rotary"]
    lines = _lines(ax)
    assert lines["uniform attention"][1] == pytest.approx([math.log(n) for n in LENGTHS])
    assert draw_entropy_vs_length({"config": {}, "runs": []}) is None


def test_plot_all_writes_pngs(tmp_path):
    paths = plot_all(results(), tmp_path)
    assert {p.name for p in paths} == {"ppl_vs_length.png", "ppl_ratio.png",
                                       "training_curves.png", "entropy_vs_length.png"}
    for p in paths:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_one_seed_ratio_error_bars_are_the_paired_bootstrap():
    res = results()
    rope = next(r for r in res["runs"] if r["label"] == "rope")
    point = next(p for p in ratio_points(res) if p[0] == "rope")
    assert point[2] == rope["ratio_spread"]["512"] > 0
    unpaired = point[1] * math.hypot(rope["ppl_spread"]["512"] / rope["ppl"]["512"],
                                     rope["ppl_spread"]["64"] / rope["ppl"]["64"])
    assert point[2] != pytest.approx(unpaired, rel=1e-3)   # not the fallback


def _with_nope_and_xpos():
    from tests.lab.helpers import run
    res = results()
    res["runs"].insert(0, run("nope", [5.9, 6.5, 8.0, 11.0, 15.0]))
    for i, enc in enumerate(("complex_order", "conv", "floater", "hierarchical",
                             "multiplicative", "recurrent")):      # sinusoidal 8th of its panel
        res["runs"].insert(2, run(enc, [5.5 + i / 10, 7.0, 9.0, 12.0, 16.0]))
    res["runs"].append(run("xpos", [5.21, 6.52, 9.01, 14.02, 22.03]))     # within 0.5 %
    for r in res["runs"]:
        if r["label"] == "xpos":                 # a training curve that differs by a hair
            r["curve"] = [[s, v * 1.002] for s, v in r["curve"]]
            r["seeds"][0]["curve"] = r["curve"]
    return res


def test_every_run_of_a_panel_has_its_own_colour_and_only_nope_is_grey():
    import matplotlib.colors as mcolors
    for fig in (draw_ppl_vs_length(_with_nope_and_xpos()),
                draw_training_curves(_with_nope_and_xpos())):
        for ax in fig.axes:
            lines = [x for x in ax.get_lines() if not x.get_label().startswith("_")]
            colours = [mcolors.to_hex(x.get_color()) for x in lines]
            assert len(set(colours)) == len(colours), ax.get_title()
            greys = [x.get_label() for x in lines
                     if len(set(mcolors.to_hex(x.get_color())[1:][i:i + 2]
                                for i in (0, 2, 4))) == 1]
            assert greys in ([], ["nope"]), (ax.get_title(), greys)


def test_look_alike_runs_are_not_called_the_same():
    res = _with_nope_and_xpos()
    rotary = _axes(draw_ppl_vs_length(res))["rotary"]
    assert "xpos" in _lines(rotary)                      # not "xpos (same as rope)"
    curves = _axes(draw_training_curves(res))["rotary"]
    assert "xpos" in _lines(curves)


def test_entropy_legends_sit_beside_the_panels():
    fig = draw_entropy_vs_length(results())
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes:
        legend = ax.get_legend()
        if ax.get_visible() and legend is not None:
            assert legend.get_window_extent(renderer).x0 >= ax.get_window_extent(renderer).x1


def test_the_ratio_plot_shows_perplexity_at_l_beside_each_ratio():
    res = results()
    fig = draw_ppl_ratio(res)
    ratio_ax, at_ax = fig.axes[:2]
    texts = [t.get_text() for t in at_ax.texts]
    assert "5.20 -> 14.0" in texts and "7.00 -> 15.0" in texts   # rope, rope + linear:4
    assert any(t.startswith("ppl@64 -> ppl@512") for t in texts)
    label_at = {tick.get_position()[1]: tick.get_text() for tick in ratio_ax.get_yticklabels()}
    at_l = {label_at[line.get_ydata()[0]]: line.get_xdata()[0] for line in at_ax.get_lines()
            if line.get_marker() == "o"}
    assert at_l["rope"] == 5.2 and at_l["rope + linear:4"] == 7.0   # in-length quality shown
    hollow = {line.get_xdata()[0] for ax in (ratio_ax, at_ax) for line in ax.get_lines()
              if line.get_marker() == "o" and line.get_markerfacecolor() == "white"}
    assert 7.0 in hollow and 5.2 not in hollow      # poor at L: hollow beside its good ratio
    assert any(x == pytest.approx(15 / 7) for x in hollow)      # in the ratio panel too
    assert "7.00 -> 15.0" in ppl_at_lengths(res, 64, 512).values()


def test_perplexities_are_printed_by_one_rule():
    assert [format_ppl(x) for x in (5.94, 6.0, 10.4, 10.0, 123.4, 1234.0, math.inf)] == \
        ["5.94", "6.00", "10.4", "10.0", "123", "1,234", "inf"]


def test_plans_get_their_own_panel_beside_all_rope():
    from tests.lab.helpers import run
    res = results()
    res["runs"] = res["runs"] + [
        {**run("smollm3_plan", [5.3, 5.4, 5.6, 6.0, 6.5]), "family": "plan"}]
    axes = _axes(draw_ppl_vs_length(res))
    plans = _lines(axes["per-layer plans (hybrids, windows)"])
    assert {"rope", "smollm3_plan"} <= set(plans)
    assert "smollm3_plan" not in _lines(axes["rotary"])


def test_smoothing_does_not_bend_a_trend_or_a_flat_loss_at_the_ends():
    """A falling line stays the same line after smoothing (its last point too), and a flat
    noisy loss ends at its own level: no upward hook at the end of a training curve."""
    from posenc.viz.plots import smooth
    line = [5.0 - 0.01 * i for i in range(400)]
    assert smooth(line) == pytest.approx(line)
    flat = [2.0 + (0.1 if i % 2 else -0.1) for i in range(400)]
    assert max(abs(v - 2.0) for v in smooth(flat)[1:-1]) <= 0.1
    assert smooth([3.0]) == [3.0] and smooth([]) == []
