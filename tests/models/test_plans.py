"""Per-layer plans: parsing and errors, saved configs, shared encodings, and exact cached
decoding / real batches with windows and sinks (the transformers oracles:
test_plan_oracles.py)."""

import pytest
import torch

from posenc.attention.cache import WindowedKVCache
from posenc.attention.masks import Window
from posenc.errors import UserError
from posenc.models.lm import LMConfig, TransformerLM
from tests.helpers import decode_in_steps

TINY = dict(vocab_size=40, d_model=32, n_heads=2, max_len=32)


def _lm(seed=0, **options) -> TransformerLM:
    torch.manual_seed(seed)
    model = TransformerLM(LMConfig(**{**TINY, **options})).eval()
    for block in model.blocks:                    # sinks start at 0: make them matter
        if block.attn.sinks is not None:
            block.attn.sinks.data.normal_()
    return model


def test_to_dict_without_a_plan_is_unchanged():
    assert LMConfig().to_dict() == {
        "vocab_size": 256, "d_model": 128, "n_layers": 2, "n_heads": 4, "max_len": 256,
        "d_ff": None, "activation": "gelu", "norm": "layernorm", "norm_eps": 1e-5,
        "norm_placement": "pre", "dropout": 0.0, "bias": False, "tie_embeddings": True,
        "pe": "rope", "pe_options": {}, "attn_backend": "auto"}


@pytest.mark.parametrize("plan", ["gemma3", {"name": "llama4", "chunk": 4},
                                  {"layers": ["rope", "nope"], "types": {}}])
def test_a_plan_round_trips_through_its_dict(plan):
    config = LMConfig(**TINY, n_layers=2, plan=plan, attn_sinks=True)
    data = config.to_dict()
    assert data["plan"] == plan and data["attn_sinks"] is True
    assert LMConfig.from_dict(data) == config


def test_explicit_plan_with_types_and_inherited_options():
    plan = {"layers": ["local", "local", "global"],
            "types": {"local": {"pe_options": {"theta": 100.0}, "window": 4},
                      "global": {"pe": "alibi", "sinks": True}}}
    specs = LMConfig(**TINY, n_layers=3, pe_options={"layout": "interleaved"},
                     plan=plan).layer_specs()
    assert specs[0] == specs[1]
    assert specs[0].pe == "rope" and specs[0].pe_options == {"layout": "interleaved",
                                                             "theta": 100.0}
    assert specs[0].window == Window("sliding", 4) and not specs[0].sinks
    assert specs[2].pe == "alibi" and specs[2].pe_options == {} and specs[2].window is None
    assert specs[2].sinks


@pytest.mark.parametrize("plan,message", [
    ({"layers": ["rope", "nope"]}, r"one layer type per layer \(n_layers=3\)"),
    ({"layers": ["rope"] * 3, "types": {"rope": {"window": 33}}},
     "window must be at most max_len=32"),
    ({"layers": ["rope"] * 3, "types": {"rope": {"window": 0}}}, "window must be an integer >= 1"),
    ({"layers": ["rope", "local", "rope"]}, "unknown layer type 'local'"),
    ({"layers": ["rope"] * 3, "types": {"rope": {"window_kind": "strided", "window": 2}}},
     "window_kind must be one of sliding, chunked"),
    ({"layers": ["rope"] * 3, "types": {"rope": {"theta": 5.0}}}, "unknown plan type 'rope' key"),
    ("mistral", "unknown plan 'mistral'; named plans: gemma3, smollm3, llama4"),
    ({"name": "gemma3", "chunk": 4}, "unknown plan 'gemma3' key"),
    ({"name": "gemma3", "window": 64}, "window must be at most max_len=32"),
    ({"layers": {"cycle": ["rope", "sinusoidal"]}}, "'sinusoidal' adds positions at the input"),
    (7, "plan must be a plan name"),
])
def test_bad_plans_get_a_one_line_error(plan, message):
    with pytest.raises(UserError, match=message) as err:
        LMConfig(**TINY, n_layers=3, plan=plan)
    assert "\n" not in str(err.value)


def test_layers_of_a_type_share_one_encoding():
    model = _lm(n_layers=6, plan="gemma3")
    pes = [block.layer_pe for block in model.blocks]
    assert all(pe is pes[0] for pe in pes[:5]) and pes[5] is not pes[0]
    assert pes[0].theta == 10_000.0 and pes[5].theta == 1_000_000.0
    assert [block.attn.window for block in model.blocks] == [Window("sliding", 8)] * 5 + [None]


# ----------------------------------------------------- exact caches and real batches

PLANS_WITH_WINDOWS = [
    {"name": "gemma3", "window": 3, "every": 2},
    {"name": "llama4", "chunk": 4, "every": 2},
    {"layers": ["slide", "chunk", "alibi"],
     "types": {"slide": {"pe": "alibi", "window": 5}, "chunk": {"window": 3,
                                                             "window_kind": "chunked"}}},
    # forget gates keep per-key terms in the cache, which a rolling cache rolls with its keys
    {"layers": ["slide", "chunk", "global"],
     "types": {"slide": {"pe": "forget_gate", "window": 4},
               "chunk": {"pe": "forget_gate", "window": 3, "window_kind": "chunked"},
               "global": {"pe": "forget_gate"}}},
    # PaTH's cache keeps keys carried past later tokens, which a rolling cache keeps too
    {"layers": ["slide", "chunk", "global"],
     "types": {"slide": {"pe": "path", "window": 4},
               "chunk": {"pe": "path_fox", "window": 3, "window_kind": "chunked"},
               "global": {"pe": "path"}}},
]


@pytest.mark.parametrize("sinks", [False, True])
@pytest.mark.parametrize("plan", PLANS_WITH_WINDOWS)
def test_cached_decoding_equals_a_full_forward_past_the_window(plan, sinks):
    model = _lm(n_layers=3, plan=plan, attn_sinks=sinks)
    ids = torch.randint(0, 40, (2, 19), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        full = model(ids)
        for prompt, step in ((1, 1), (6, 2), (11, 4)):
            caches = model.make_caches(2, 19)
            assert any(isinstance(c, WindowedKVCache) for c in caches)
            parts = [model(ids[:, :prompt], caches=caches)]
            for start in range(prompt, 19, step):
                parts.append(model(ids[:, start:start + step], caches=caches))
            torch.testing.assert_close(torch.cat(parts, 1), full, atol=2e-5, rtol=1e-5)


@pytest.mark.parametrize("plan", PLANS_WITH_WINDOWS)
def test_windowed_decode_steps_read_no_tensor_on_the_host(plan):
    """On the meta device a tensor has no data, so a host read would raise: rolling caches
    (keys, positions, padding and encoding terms) decode without one."""
    model = _lm(n_layers=3, plan=plan, attn_sinks=True).to("meta")
    ids = torch.zeros(2, 6, dtype=torch.long, device="meta")
    with torch.no_grad():
        caches = model.make_caches(2, 12)
        model(ids, attention_mask=torch.ones(2, 6, dtype=torch.long, device="meta"),
              caches=caches)
        for _ in range(3):
            out = model(ids[:, :1], caches=caches)
    assert out.shape == (2, 1, 40) and out.device.type == "meta"


def test_windows_change_the_output():
    """A window is not a no-op: the same weights without it give other logits past it."""
    windowed = _lm(n_layers=2, plan={"name": "gemma3", "window": 3, "every": 2})
    plain = _lm(n_layers=2, plan={"name": "gemma3", "window": 32, "every": 2})
    ids = torch.randint(0, 40, (1, 10), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        a, b = windowed(ids), plain(ids)
    torch.testing.assert_close(a[:, :3], b[:, :3])
    assert (a[:, 3:] - b[:, 3:]).abs().max() > 1e-3


@pytest.mark.parametrize("plan", PLANS_WITH_WINDOWS)
def test_padded_generation_gives_each_row_what_it_gets_alone(plan):
    model = _lm(n_layers=3, plan=plan, attn_sinks=True)
    prompts = [torch.randint(1, 40, (n,), generator=torch.Generator().manual_seed(n))
               for n in (7, 3)]
    width = 7
    ids = torch.stack([torch.cat([torch.zeros(width - len(p), dtype=torch.long), p])
                       for p in prompts])
    mask = torch.stack([torch.arange(width) >= width - len(p) for p in prompts]).long()
    batch = model.generate(ids, 9, attention_mask=mask)
    for row, prompt in enumerate(prompts):
        alone = model.generate(prompt[None], 9)
        assert torch.equal(batch[row, width:], alone[0, len(prompt):])


@pytest.mark.parametrize("plan", PLANS_WITH_WINDOWS)
def test_packed_rows_equal_documents_alone(plan):
    model = _lm(n_layers=3, plan=plan, attn_sinks=True)
    docs = [torch.randint(0, 40, (n,), generator=torch.Generator().manual_seed(n))
            for n in (6, 9)]
    ids = torch.cat(docs)[None]
    document_ids = torch.cat([torch.full((len(d),), i) for i, d in enumerate(docs)])[None]
    with torch.no_grad():
        packed = model(ids, document_ids=document_ids)
        alone = torch.cat([model(d[None]) for d in docs], dim=1)
    torch.testing.assert_close(packed, alone, atol=2e-5, rtol=1e-5)


def test_batch_positions_with_windows_equal_rows_alone():
    """(B, T) positions: each row equals that row run alone with its own positions."""
    model = _lm(n_layers=3, plan=PLANS_WITH_WINDOWS[2])
    ids = torch.randint(0, 40, (2, 12), generator=torch.Generator().manual_seed(3))
    positions = torch.stack([torch.arange(12), torch.arange(5, 17)])
    with torch.no_grad():
        batch = model(ids, positions=positions)
        for row in range(2):
            alone = model(ids[row:row + 1], positions=positions[row])
            torch.testing.assert_close(batch[row:row + 1], alone, atol=2e-5, rtol=1e-5)


# ----------------------------------------------------------------- encoder-decoder

def test_seq2seq_decoder_plan_decodes_exactly_with_windows_and_sinks():
    from posenc.models.seq2seq import Seq2SeqTransformer
    from posenc.models.seq2seq_config import Seq2SeqConfig
    config = Seq2SeqConfig(**TINY, n_encoder_layers=1, n_decoder_layers=2, attn_sinks=True,
                           decoder_plan={"name": "gemma3", "window": 3, "every": 2})
    assert Seq2SeqConfig.from_dict(config.to_dict()) == config
    assert "decoder_plan" not in Seq2SeqConfig(**TINY).to_dict()
    torch.manual_seed(0)
    model = Seq2SeqTransformer(config).eval()
    assert model.decoder[0].attn.window == Window("sliding", 3)
    assert model.decoder[1].attn.window is None and model.decoder[1].attn.sinks is not None
    src = torch.randint(0, 40, (2, 6), generator=torch.Generator().manual_seed(4))
    tgt = torch.randint(0, 40, (2, 11), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        memory = model.encode(src)
        full = model.decode(memory, tgt)
        caches, cross = model.make_caches(2, 11, 6)
        assert isinstance(caches[0], WindowedKVCache)
        steps = [model.decode(memory, tgt[:, :4], caches, cross)]
        steps += [model.decode(memory, tgt[:, i:i + 1], caches, cross) for i in range(4, 11)]
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=2e-5, rtol=1e-5)


def test_seq2seq_decoder_plan_checks_its_length():
    from posenc.models.seq2seq_config import Seq2SeqConfig
    with pytest.raises(UserError, match=r"n_layers=2"):
        Seq2SeqConfig(**TINY, n_decoder_layers=2, decoder_plan={"layers": ["rope"]})


@pytest.mark.parametrize("pe", ["rope", "alibi"])
def test_attn_sinks_without_a_plan_on_every_backend_and_cache(pe):
    model = _lm(n_layers=2, pe=pe, attn_sinks=True)
    assert all(block.attn.sinks is not None for block in model.blocks)
    ids = torch.randint(0, 40, (2, 9), generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        full = model(ids, backend="eager")
        for backend in ("sdpa", "flex"):
            torch.testing.assert_close(model(ids, backend=backend), full, atol=2e-5, rtol=1e-5)
        steps = decode_in_steps(model, ids, 5)
    torch.testing.assert_close(steps, full, atol=2e-5, rtol=1e-5)
    plain = _lm(n_layers=2, pe=pe)
    assert not any(name.endswith("sinks") for name, _ in plain.named_parameters())


def test_length_dependent_types_replay_through_windowed_caches():
    """Two dynamic-NTK layer types (different thetas) and a window: each decoding step
    equals a full forward over the prefix (the caches replay when either type's
    frequencies change)."""
    scaling = {"rope_type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 6}
    plan = {"layers": {"cycle": ["w", "g"]},
            "types": {"w": {"window": 4, "window_kind": "chunked"},
                      "g": {"pe_options": {"theta": 500.0}}}}
    model = _lm(n_layers=2, pe_options={"scaling": scaling}, plan=plan)
    assert [e.length_dependent for e in model.encodings] == [True, True]
    ids = torch.randint(0, 40, (2, 13), generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        caches = model.make_caches(2, 13)
        model(ids[:, :3], caches=caches)
        for i in range(3, 13):
            step = model(ids[:, i:i + 1], caches=caches)[:, -1]
            torch.testing.assert_close(step, model(ids[:, :i + 1])[:, -1], atol=2e-5,
                                       rtol=1e-5)


def test_describe_plans_lists_every_named_plan_with_its_options():
    from posenc.models.plans import NAMED_PLANS, describe_plans
    rows = describe_plans()
    assert [row["name"] for row in rows] == list(NAMED_PLANS)
    assert rows[0]["options"] == {"window": None, "every": 6, "local_theta": 10_000.0,
                                  "global_theta": 1_000_000.0}
    assert all(row["summary"] and "\n" not in row["summary"] for row in rows)


def test_seq2seq_encoder_plan_builds_per_type_encodings_and_refuses_windows():
    from posenc.models.seq2seq import Seq2SeqTransformer
    from posenc.models.seq2seq_config import Seq2SeqConfig
    config = Seq2SeqConfig(**TINY, n_encoder_layers=3, n_decoder_layers=1, encoder_pe="t5",
                           encoder_plan={"layers": {"cycle": ["t5", "t5", "nope"]},
                                         "types": {"nope": {"pe": "nope", "sinks": True}}})
    assert Seq2SeqConfig.from_dict(config.to_dict()) == config
    specs = config.encoder_specs()
    assert specs[0].pe_options.get("bidirectional") is True and specs[2].pe == "nope"
    torch.manual_seed(0)
    model = Seq2SeqTransformer(config).eval()
    assert model.encoder[0].layer_pe is model.encoder[1].layer_pe is model.encoder_pe
    assert model.encoder[2].layer_pe.name == "nope" and model.encoder[2].attn.sinks is not None
    src = torch.randint(1, 40, (1, 5), generator=torch.Generator().manual_seed(8))
    padded = torch.cat([src, torch.zeros(1, 2, dtype=torch.long)], dim=1)
    mask = torch.tensor([[1] * 5 + [0] * 2])
    with torch.no_grad():
        torch.testing.assert_close(model.encode(padded, mask)[:, :5], model.encode(src),
                                   atol=2e-5, rtol=1e-5)
    with pytest.raises(UserError, match="encoder_plan: layer type 'rope' has a window"):
        Seq2SeqConfig(**TINY, n_encoder_layers=2,
                      encoder_plan={"layers": ["rope", "rope"],
                                    "types": {"rope": {"window": 4}}})


def test_llama4_tunes_the_nope_layers_temperature_as_llama_4_does():
    from posenc import LMConfig, TransformerLM
    model = TransformerLM(LMConfig(pe="rope", n_layers=4, d_model=32, n_heads=2, max_len=64,
                                   plan={"name": "llama4", "chunk": 16}))
    nope = model.blocks[3].layer_pe
    assert nope.name == "nope" and nope.temperature_floor == 16
    assert nope.temperature_scale == 0.1                  # Llama4TextConfig.attn_scale
    plain = TransformerLM(LMConfig(pe="rope", n_layers=4, d_model=32, n_heads=2, max_len=64,
                                   plan={"name": "llama4", "chunk": 16, "nope_options": {}}))
    assert plain.blocks[3].layer_pe.temperature_floor is None


BAD_WINDOWS = [(0, "sliding", "window must be an integer >= 1 (tokens), got 0"),
               ("8", "sliding", "window must be an integer >= 1 (tokens), got '8'"),
               (4, "dilated", "window_kind must be one of sliding, chunked, got 'dilated'"),
               (33, "chunked", "window must be at most max_len=32 tokens, got 33")]


@pytest.mark.parametrize("size,kind,line", BAD_WINDOWS)
def test_a_bad_window_is_refused_in_the_same_line_from_every_entry_point(size, kind, line):
    """The window is checked once (Window.declare): a plan's type, a saved config read
    back, an encoder-decoder's decoder plan and a named plan all refuse it in its one line,
    after the layer type it belongs to."""
    from posenc.models.seq2seq_config import Seq2SeqConfig
    plan = {"layers": {"cycle": ["local", "rope"]},
            "types": {"local": {"window": size, "window_kind": kind}}}
    saved = LMConfig(**TINY, n_layers=2).to_dict() | {"plan": plan}
    entries = [lambda: Window.declare(size, kind, max_len=32),
               lambda: LMConfig(**TINY, n_layers=2, plan=plan),
               lambda: LMConfig.from_dict(saved),
               lambda: Seq2SeqConfig(**TINY, decoder_plan=plan)]
    if kind == "sliding":
        entries.append(lambda: LMConfig(**TINY, n_layers=2,
                                        plan={"name": "gemma3", "window": size, "every": 2}))
    for entry in entries:
        with pytest.raises(UserError) as err:
            entry()
        message = str(err.value)
        assert "\n" not in message and message.endswith(line)
        assert message in (line, f"plan type 'local': {line}")
