"""The atlas's log-n panel: a factor of 1 up to L, then the log ratio."""

from __future__ import annotations

import math

import pytest
import torch

from posenc.atlas.relative import logn_panel


def test_logn_factor_is_one_up_to_l_then_log_ratio(tmp_path):
    panel = logn_panel(tmp_path)
    keys = panel.data["keys"]
    for base, factor in panel.data["factor"].items():
        base = int(base)
        expected = (torch.log(keys.double()) / math.log(base)).clamp(min=1.0)
        torch.testing.assert_close(factor.double(), expected, rtol=1e-5, atol=1e-6)
        assert factor[keys == base].item() == pytest.approx(1.0)
