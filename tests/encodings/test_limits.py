"""Declared position limits agree with what the encodings refuse: a model of each encoding
serves a token at its limit, refuses one just past it, and an encoding that declares no limit
serves a position far past its max_len."""

import pytest
import torch

from posenc import LMConfig, TransformerLM
from posenc.encodings import build_encoding, list_encodings
from posenc.encodings.limits import PositionLimit, tightest_limit
from tests.helpers import context_options

#: a position far past max_len below, for encodings that declare no limit
FAR = 1000
#: variants whose options change the limit, besides each encoding's defaults
VARIANTS = [("multiplicative", {"positions": "sinusoidal"}),
            ("deberta", {"absolute_query": True}),
            ("hierarchical", {"n_positions": 20})]
CASES = [(pe, {}) for pe in list_encodings()] + VARIANTS


def one_token_model(pe: str, options: dict) -> TransformerLM:
    torch.manual_seed(0)
    config = LMConfig(vocab_size=32, d_model=16, n_layers=1, n_heads=2, max_len=8, pe=pe,
                      pe_options={**context_options(pe, vocab_size=32), **options})
    return TransformerLM(config).eval()


def logits_at(model: TransformerLM, position: int) -> torch.Tensor:
    """The logits of one token placed at ``position``: (1, 1, V)."""
    with torch.no_grad():
        return model(torch.tensor([[3]]), positions=torch.tensor([position]))


@pytest.mark.parametrize(("pe", "options"), CASES, ids=[f"{p}{o or ''}" for p, o in CASES])
def test_declared_limit_is_what_the_forward_refuses(pe, options):
    model = one_token_model(pe, options)
    limit = model.pe.position_limit
    assert model.pe.max_position == (None if limit is None else limit.max_position)
    if limit is None:
        assert torch.isfinite(logits_at(model, FAR)).all()
        return
    assert isinstance(limit, PositionLimit) and limit.encoding == pe
    served = min(limit.max_position, FAR)         # FLOATER's bound of 2**24 is too far to run
    assert torch.isfinite(logits_at(model, served)).all()
    with pytest.raises(ValueError):
        logits_at(model, limit.max_position + 1)


def test_table_encodings_declare_their_tables():
    def limit(name, **options):
        return build_encoding(name, n_heads=2, head_dim=8, max_len=8, **options).max_position

    assert limit("learned") == limit("tupe") == 7
    assert limit("multiplicative") == 7                     # a learned table by default
    assert limit("multiplicative", positions="sinusoidal") is None
    assert limit("deberta", absolute_query=True) == 7 and limit("deberta") is None
    assert limit("hierarchical") == 63 and limit("hierarchical", n_positions=20) == 19
    assert limit("rope") is None and limit("alibi") is None


def test_xpos_limit_follows_its_dtype_and_center():
    pe = build_encoding("xpos", n_heads=2, head_dim=8, center=100)
    wide = pe.position_limit
    assert wide.max_position == 100 + pe.max_distance(torch.float32)
    assert wide.bound == "range in float32"
    narrow = pe.half().position_limit
    assert narrow.max_position == 100 + pe.max_distance(torch.float16) < wide.max_position
    assert narrow.bound == "range in float16"


def test_tightest_limit_is_the_smallest_declared():
    a, b = PositionLimit(9, "learned"), PositionLimit(4, "hierarchical")
    assert tightest_limit([None, a, b, None]) == b
    assert tightest_limit([None, None]) is None and tightest_limit([]) is None
    assert b.positions == 5 and b.serves(5) and not b.serves(6)


def test_a_bounded_trajectory_declares_its_limit():
    """FLOATER's process stops at max_positions: declared, so callers read it."""
    from posenc.encodings import build_encoding
    pe = build_encoding("floater", n_heads=2, head_dim=8, max_len=16)
    assert pe.position_limit.max_position == pe.max_positions - 1
    assert pe.position_limit.encoding == "floater"
    recurrent = build_encoding("recurrent", n_heads=2, head_dim=8, max_len=16)
    assert recurrent.max_positions is None and recurrent.position_limit is None
