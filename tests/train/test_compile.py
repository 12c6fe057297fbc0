"""``compile=True``: the loop runs the model through torch.compile and trains the same run
(the same losses up to rounding, the same saved weights' shapes, resumable either way)."""

from __future__ import annotations

import torch

from posenc.train import load_run, train
from tests.train.helpers import tiny


def _losses(run) -> list[float]:
    return [r["loss"] for r in load_run(run).log if "loss" in r]


def test_compiled_training_equals_eager_and_resumes_either_way(tmp_path, monkeypatch):
    compiled = []
    real = torch.compile

    def compile_checked(module, **kw):        # aot_eager: AOTAutograd's graphs, run eagerly
        compiled.append(module)              # (inductor's code is torch's; speed in BENCHMARKS)
        return real(module, backend="aot_eager", **kw)
    monkeypatch.setattr(torch, "compile", compile_checked)
    torch._dynamo.reset()
    eager = train(tiny(tmp_path), tmp_path / "eager", progress=False)
    assert compiled == []
    fast = train(tiny(tmp_path, compile=True), tmp_path / "fast", progress=False)
    assert len(compiled) == 1
    torch.testing.assert_close(torch.tensor(_losses(tmp_path / "fast")),
                               torch.tensor(_losses(tmp_path / "eager")), rtol=1e-4, atol=1e-5)
    assert abs(fast.final_loss - eager.final_loss) < 1e-4
    # an eager run cut at step 4 resumes compiled (compile is how it runs, not what)

    def crash(step, record, model):
        if step == 4:
            raise KeyboardInterrupt
    try:
        train(tiny(tmp_path), tmp_path / "cut", progress=False, on_step=crash)
    except KeyboardInterrupt:
        pass
    train(tiny(tmp_path, compile=True), tmp_path / "cut", progress=False)
    torch.testing.assert_close(torch.tensor(_losses(tmp_path / "cut")),
                               torch.tensor(_losses(tmp_path / "eager")), rtol=1e-4, atol=1e-5)
