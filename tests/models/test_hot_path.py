"""The hot path of the LM never reads a tensor's value on the host, and compiles whole.

Two ways to prove it without a GPU:

- on the ``meta`` device a tensor has no data, so any host read (``.item()``, ``int(t)``,
  ``.tolist()``, a data-dependent branch) raises: a training step and a cached decode step run
  there for every encoding that does not need a position's value by construction;
- ``torch.compile(model, fullgraph=True)`` fails on any graph break: a training step (its
  backward included) and cached decode steps compile whole and equal eager.
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

from posenc import LMConfig, TransformerLM, list_encodings

pytestmark = pytest.mark.usefixtures("single_thread")

#: encodings whose hot path reads a position's value on the host, and why
READS_VALUES = {
    "recurrent": "its trajectory is generated up to the largest position",
    "floater": "its ODE is integrated up to the largest position",
}

SCALINGS = {
    "linear": {"rope_type": "linear", "factor": 2.0},
    "ntk": {"rope_type": "ntk", "factor": 2.0},
    "yarn": {"rope_type": "yarn", "factor": 2.0},
    "llama3": {"rope_type": "llama3", "factor": 2.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0},
    "longrope": {"rope_type": "longrope", "factor": 2.0, "long_factor": [1.5] * 8,
                 "short_factor": [1.0] * 8, "original_max_position_embeddings": 16},
}
#: what the compile tests cover: the encodings without host reads or tables of the text's
#: vocabulary, and RoPE with every scaling but dynamic NTK (which reads the sequence length)
COMPILED = ["nope", "learned", "sinusoidal", "rope", "alibi", "t5", "xpos", "kerple",
            "fire", "cope", "dynamic_bias", "forget_gate"] + \
    [f"rope+{kind}" for kind in SCALINGS]


def _model(spec: str, vocab: int = 64) -> TransformerLM:
    name, _, kind = spec.partition("+")
    options = {"scaling": SCALINGS[kind]} if kind else {}
    if name == "complex_order":
        options["vocab_size"] = vocab
    torch.manual_seed(0)
    return TransformerLM(LMConfig(vocab_size=vocab, d_model=32, n_layers=2, n_heads=2,
                                  max_len=32, pe=name, pe_options=options))


@pytest.mark.parametrize("name", [
    pytest.param(n, marks=pytest.mark.xfail(strict=True, reason=READS_VALUES[n]))
    if n in READS_VALUES else n for n in list_encodings()] + [f"rope+{k}" for k in SCALINGS])
def test_training_and_decoding_run_on_the_meta_device(name):
    model = _model(name).to("meta")
    ids = torch.zeros(2, 24, dtype=torch.long, device="meta")
    loss = model(ids).float().logsumexp(-1).mean()
    loss.backward()
    with torch.no_grad():
        caches = model.make_caches(2, 26)
        model(ids, caches=caches)
        model(ids[:, :1], caches=caches)
        out = model(ids[:, :1], caches=caches)
    assert out.shape == (2, 1, 64) and out.device.type == "meta"


def _compiled_matches_eager(name: str, backend: str) -> None:
    torch._dynamo.reset()   # each test compiles the same forward code for another model:
    model = _model(name)    # without a reset, dynamo's per-code recompile limit would count them
    reference = copy.deepcopy(model)
    compiled = torch.compile(model, fullgraph=True, backend=backend)
    ids = torch.randint(0, 64, (2, 24), generator=torch.Generator().manual_seed(1))
    losses = []
    for m in (compiled, reference):
        loss = F.cross_entropy(m(ids).flatten(0, 1), ids.flatten())
        loss.backward()
        losses.append(loss)
    torch.testing.assert_close(losses[0], losses[1], rtol=1e-5, atol=1e-6)
    for (key, p), q in zip(model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-6, msg=key)
    model.eval()
    reference.eval()
    with torch.no_grad():
        caches, ref_caches = model.make_caches(2, 24), reference.make_caches(2, 24)
        model(ids[:, :12], caches=caches)
        reference(ids[:, :12], caches=ref_caches)
        for t in range(12, 20):              # longrope crosses its original length at 16
            torch.testing.assert_close(compiled(ids[:, t:t + 1], caches=caches),
                                       reference(ids[:, t:t + 1], caches=ref_caches),
                                       rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", COMPILED)
def test_fullgraph_compile_of_training_and_decoding_equals_eager(name):
    """Dynamo traces the whole step (fullgraph: no break) and AOTAutograd its backward;
    ``aot_eager`` runs the traced graphs without generating code."""
    _compiled_matches_eager(name, "aot_eager")


@pytest.mark.parametrize("name", ["alibi"])
def test_inductor_compiles_a_biased_model(name):
    """The same through inductor's generated code (slower to compile: one encoding)."""
    _compiled_matches_eager(name, "inductor")
