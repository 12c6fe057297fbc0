"""``hierarchical``: n² positions from a learned table of n rows (the formula, extending
a trained ``learned`` model in place) and its options."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from posenc import LMConfig, TransformerLM, build_encoding
from posenc.encodings.hierarchical import (
    HierarchicalEncoding,
    extend_learned_model,
    hierarchical_positions,
)

H, D = 2, 4
C = H * D
V = 48


def _pe(name, **options):
    return build_encoding(name, n_heads=H, head_dim=D, max_len=32, **options)


def _learned_lm(max_len=6):
    torch.manual_seed(3)
    cfg = LMConfig(vocab_size=V, d_model=C, n_layers=1, n_heads=H, max_len=max_len, d_ff=16,
                   pe="learned", pe_options={"logn_base_len": 4})
    model = TransformerLM(cfg).eval()
    with torch.no_grad():
        model.pe.table.normal_(0, 0.5)                        # a "trained" table
    return model


def test_hierarchical_formula_and_table_reproduction():
    n, alpha = 5, 0.3
    table = torch.randn(n, C)
    u = hierarchical_positions(table, torch.arange(n * n), alpha)            # (n², C)
    assert_close(u[:n], table)                                # first block = trained table
    q = (table - alpha * table[0]) / (1 - alpha)
    for i, j in [(1, 0), (2, 3), (4, 4)]:
        assert_close(u[i * n + j], alpha * q[i] + (1 - alpha) * q[j])
    assert torch.cdist(u, u).add(torch.eye(n * n)).min() > 1e-3          # all n² distinct


def test_extend_learned_model_in_place():
    model = _learned_lm(max_len=6)
    ids = torch.randint(0, V, (2, 6))
    with torch.no_grad():
        before = model(ids)
    param = model.pe.table
    table = param.detach().clone()
    assert extend_learned_model(model, alpha=0.4) is model
    assert isinstance(model.pe, HierarchicalEncoding)
    assert model.pe.table is param                            # an optimizer keeps training it
    assert model.config.pe == "hierarchical"
    assert model.config.pe_options == {"logn_base_len": 4, "alpha": 0.4, "base_len": 6}
    assert_close(model.pe.table, table)
    long_ids = torch.randint(0, V, (1, 36))
    with torch.no_grad():
        assert_close(model(ids), before)                      # positions 0..n-1 unchanged
        out = model(long_ids)                                 # n² = 36 positions now work
        assert out.shape == (1, 36, V)
        with pytest.raises(ValueError, match="n_positions=36"):
            model(torch.randint(0, V, (1, 37)))
    # the new config rebuilds a model that loads the same state dict
    rebuilt = TransformerLM(model.config).eval()
    rebuilt.load_state_dict(model.state_dict())
    with torch.no_grad():
        assert_close(rebuilt(long_ids), out)


def test_extend_learned_model_rejects_other_encodings(tiny_lm):
    with pytest.raises(ValueError, match="'learned'"):
        extend_learned_model(tiny_lm("rope"))
    with pytest.raises(ValueError, match="alpha"):
        extend_learned_model(_learned_lm(), alpha=1.0)


@pytest.mark.parametrize("options,match", [
    ({"alpha": 0.0}, r"alpha must be a number in \(0.0, 1.0\)"),
    ({"alpha": 1.2}, "alpha"),
    ({"base_len": 4, "n_positions": 17}, r"n_positions must be in \[base_len, base_len²\]"),
    ({"base_len": 4, "n_positions": 3}, "n_positions"),
    ({"base_len": 0}, "base_len")])
def test_hierarchical_options(options, match):
    with pytest.raises(ValueError, match=match):
        _pe("hierarchical", **options)
