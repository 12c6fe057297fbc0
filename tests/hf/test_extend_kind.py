"""What ``posenc extend`` writes: its kind recognises an older posenc's results (no kind
stamped) and opens them with nothing to resume; the passkey figures are named per row."""

from __future__ import annotations

from posenc.hf.extend_kind import EXTEND_KIND, passkey_figures
from posenc.hf.report import passkey_figure


def test_an_older_results_json_is_recognised_and_migrated_without_settings():
    old = {"methods": {"none": {}}, "config": {"lengths": [64]}, "n_tokens": 100}
    assert EXTEND_KIND.legacy(old)
    assert not EXTEND_KIND.legacy({"methods": {}, "config": {}})          # no n_tokens
    migrated = EXTEND_KIND.migrate(old, 0)
    assert migrated["setting"] is None and migrated["partial"] == {}
    assert migrated["notes"] == [] and migrated["methods"] == old["methods"]


def test_every_method_row_names_its_passkey_figure():
    results = {"methods": {"none": {}, "yarn": {}}}
    assert passkey_figures(results) == [passkey_figure("none"), passkey_figure("yarn")]
    assert passkey_figures({"methods": None}) == []
