"""Log axes: nice ticks over narrow and wide ranges."""

import matplotlib.pyplot as plt
import pytest

from posenc.viz.axes import nice_log_ticks


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


@pytest.mark.parametrize("low, high", [(4.8, 5.9), (5.0, 300.0), (0.9, 1.2), (1.0, 1e6)])
def test_nice_log_ticks_cover_narrow_and_wide_ranges(low, high):
    ticks = nice_log_ticks(low, high)
    assert len(ticks) >= 4 and all(low <= t <= high for t in ticks)
    assert ticks == sorted(set(ticks))
