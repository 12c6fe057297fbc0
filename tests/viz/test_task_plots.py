"""The task study's figure draws the means and spreads of its summary."""

from __future__ import annotations

import pytest

from posenc.lab.tasks.report import summarize
from tests.lab.helpers import study_results as _results

pytestmark = pytest.mark.usefixtures("single_thread")


def test_the_figure_draws_the_means_and_spreads_of_the_summary(tmp_path, monkeypatch):
    import matplotlib.pyplot as plt

    from posenc.viz.task_plots import task_figure
    res = _results(tmp_path, monkeypatch, [0.6, 0.8], [0.0, 0.0])
    res["summary"] = summarize(res)
    fig = task_figure(res)
    ax, tokens = fig.axes                              # exact match above token accuracy
    assert "exact match" in ax.get_title() and "token accuracy" in tokens.get_title()
    lines = {c.get_label(): c.lines[0] for c in ax.containers}      # errorbar: data line
    assert set(lines) == {"nope", "rope"}
    assert list(lines["nope"].get_ydata()) == pytest.approx([0.9, 0.7])
    assert list(lines["rope"].get_ydata()) == pytest.approx([0.9, 0.0])
    xs = {k: list(v.get_xdata()) for k, v in lines.items()}
    assert xs["nope"] != xs["rope"]                    # equal values stay apart
    assert xs["nope"] == pytest.approx([8, 16], rel=0.05)
    assert [t.get_text().split("\n")[0] for t in ax.get_xticklabels()] == ["8", "16"]
    heights = {c.get_label(): [seg[1][1] - seg[0][1] for seg in c.lines[2][0].get_segments()]
               for c in ax.containers}                              # error bars: 2 x spread
    assert heights["nope"] == pytest.approx([0.0, 2 * 0.1414], abs=0.015)
    assert heights["rope"] == pytest.approx([0.0, 0.0], abs=0.015)   # eval s.e. only
    assert [t.get_text() for t in ax.texts] == ["all encodings equal at 8"]   # both 0.9
    res = _results(tmp_path / "zeros", monkeypatch, [0.0, 0.0], [0.0, 0.0])
    res["summary"] = summarize(res)
    fig2 = task_figure(res)
    assert [t.get_text() for t in fig2.axes[0].texts] == ["all encodings equal at 8, 16"]
    plt.close(fig2)
    plt.close(fig)


@pytest.mark.parametrize("lengths", [[20, 22, 25, 30, 40], [8, 9, 10, 12, 16],
                                     [8, 12, 16, 24, 32, 48, 64]])
@pytest.mark.parametrize("lines", [1, 2, 5, 9])
def test_nudged_points_stay_nearest_their_own_length(lengths, lines):
    """Every line's point at a length is closer to that length than to either neighbour (on
    the log axis), and nudges never exceed 4 % between neighbouring lines."""
    import math

    from posenc.viz.task_plots import MAX_NUDGE, nudge_step
    step = nudge_step(lengths, lines)
    assert 0 <= step <= MAX_NUDGE
    widest = step * (lines - 1) / 2                      # the outermost line's offset
    for a, b in zip(lengths, lengths[1:]):
        assert widest < math.log(b / a) / 2


def test_lengths_far_apart_get_the_full_nudge_and_one_line_none():
    from posenc.viz.task_plots import MAX_NUDGE, nudge_step
    assert nudge_step([8, 16, 32, 64], 3) == MAX_NUDGE
    assert nudge_step([20, 22, 25], 5) < MAX_NUDGE
    assert nudge_step([8, 16], 1) == 0.0
