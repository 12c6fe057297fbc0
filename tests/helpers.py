"""Shared by tests in several folders: tiny models whose outputs depend strongly on
positions, the options a test context supplies to an encoding, a small text corpus, the check
that bad input raises a one-line ValueError, and the mark of Hugging Face oracle tests.

The default init keeps weights small, which makes attention nearly uniform, so a test comparing
two ways of computing the same logits could pass even if positions were wrong. ``sharpen``
rescales every parameter so that attention is peaked and position terms matter.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from posenc import LMConfig, TransformerLM
from posenc.encodings import encoding_options

#: options a test context supplies when an encoding declares them without a usable default
CONTEXT_OPTIONS = ("vocab_size",)


def sharpen(model: torch.nn.Module, std: float = 0.3, seed: int = 0) -> torch.nn.Module:
    """Overwrite every parameter with N(0, std^2) (norm gains: 1 + noise), deterministically."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen, dtype=torch.float32) * std
            is_gain = name.endswith("weight") and p.dim() == 1
            p.copy_((1.0 + 0.1 * noise) if is_gain else noise)
    return model


def causal_layer_grads(pe: torch.nn.Module, *, d_model: int = 16, length: int = 72,
                       first_pos: int = 3, seed: int = 2, consecutive: bool = True):
    """One causal attention layer over ``pe`` (sharpened) in training, positions first_pos..
    (passed as the consecutive run they are, as a model does, unless ``consecutive=False``):
    its output (2, length, d_model) and the gradients of the input and every parameter."""
    from posenc.attention import AttentionContext, MultiHeadAttention
    torch.manual_seed(seed)
    sharpen(pe, seed=seed)
    attn = MultiHeadAttention(d_model, pe.n_heads)
    x = torch.randn(2, length, d_model, requires_grad=True)
    pos = torch.arange(length) + first_pos
    out, _ = attn(x, AttentionContext(pos, causal=True, consecutive=consecutive), pe)
    params = [x, *attn.parameters(), *pe.parameters()]
    return out, torch.autograd.grad(out, params, torch.randn_like(out))


def context_options(name: str, vocab_size: int = 48) -> dict:
    """Options an encoding needs from its model (e.g. ``vocab_size``) and has no default for."""
    values = {"vocab_size": vocab_size}
    return {key: values[key] for key, default in encoding_options(name).items()
            if key in CONTEXT_OPTIONS and default is None}


def input_terms(pe, batch: int, length: int, seed: int = 3):
    """What self-attention hands an encoding that reads its input (``token_terms``) for
    ``length`` keys, from a random input (batch, length, H * D); None for the others."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, length, pe.n_heads * pe.head_dim, generator=gen)
    return pe.token_terms(x)


def hook_context(pe, q_pos, k_pos, *, batch: int = 1, **flags):
    """A checked HookContext (``flags``: causal, consecutive, backend) that carries the
    :func:`input_terms` of every key, as self-attention builds it."""
    from posenc.encodings.context import HookContext
    return HookContext.for_positions(q_pos, k_pos, key_terms=input_terms(
        pe, batch, k_pos.shape[-1]), **flags)


def tiny_lm_factory(pe: str, pe_options: dict | None = None, *, max_len: int = 32,
                    d_model: int = 32, n_heads: int = 4, n_layers: int = 2,
                    vocab_size: int = 48, std: float = 0.3, **config) -> TransformerLM:
    """A small sharpened TransformerLM in eval mode."""
    cfg = LMConfig(vocab_size=vocab_size, d_model=d_model, n_layers=n_layers, n_heads=n_heads,
                   max_len=max_len, d_ff=2 * d_model, pe=pe,
                   pe_options={**context_options(pe, vocab_size), **(pe_options or {})},
                   **config)
    return sharpen(TransformerLM(cfg), std).eval()


def decode_in_steps(model, ids, prompt: int):
    """Logits (B, T, V) of ``ids`` fed to ``model`` through its KV caches: the first
    ``prompt`` tokens at once, then one token a step (to compare with a full forward)."""
    caches = model.make_caches(ids.shape[0], ids.shape[1])
    steps = [model(ids[:, :prompt], caches=caches)] + [
        model(ids[:, i:i + 1], caches=caches) for i in range(prompt, ids.shape[1])]
    return torch.cat(steps, 1)


def model_for(pe: str, **kw) -> TransformerLM:
    """A 3-layer, width-64 TransformerLM over ``pe`` at its own init; ``kw``: LMConfig fields."""
    cfg = dict(vocab_size=64, d_model=64, n_layers=3, n_heads=4, max_len=32, pe=pe,
               pe_options=context_options(pe, 64))
    cfg.update(kw)
    return TransformerLM(LMConfig(**cfg))


def make_corpus(folder, n=30):
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        (folder / f"f{i:02d}.txt").write_text("".join(f"the cat {i} sat on mat {j}.\n"
                                                      for j in range(20)))
    return folder


def raises_one_line(match: str, fn, *args, **kwargs) -> str:
    """Call fn; assert a one-line ValueError matching ``match``; return the message."""
    with pytest.raises(ValueError, match=match) as err:
        fn(*args, **kwargs)
    message = str(err.value)
    assert "\n" not in message
    return message


#: marks a test that compares with Hugging Face transformers: skipped when it is not installed
needs_transformers = pytest.mark.skipif(importlib.util.find_spec("transformers") is None,
                                        reason="transformers is not installed")


#: the browsers a page render test runs, first found on PATH
BROWSERS = ("chromium", "chromium-browser", "google-chrome")


def chromium_or_skip() -> str:
    """The path of a headless-capable Chromium, or skip the test saying loudly (a warning as
    well as the skip reason) that the page was not rendered. Nothing installs one: the test
    runs where a browser is already on PATH."""
    import shutil
    import warnings
    browser = next((shutil.which(n) for n in BROWSERS if shutil.which(n)), None)
    if browser is None:
        message = (f"index.html was NOT rendered: no browser on PATH ({', '.join(BROWSERS)}); "
                   "posenc installs none, the test runs where one is installed")
        warnings.warn(message, stacklevel=2)
        pytest.skip(message)
    return browser


def run_headless(browser: str, scratch: Path, *args: str, **kwargs):
    """Run ``browser`` headless with ``args``; its home, profile, configuration and caches
    live in ``scratch`` (a test's tmp_path), so a render test writes nothing in the user's
    home. ``kwargs`` go to :func:`subprocess.run` (check and capture_output are on)."""
    import os
    import subprocess
    home = scratch / "browser-home"
    home.mkdir(exist_ok=True)
    env = {**os.environ, "HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"),
           "XDG_CACHE_HOME": str(home / ".cache")}
    return subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu",
                           f"--user-data-dir={home / 'profile'}", *args], env=env,
                          check=True, capture_output=True, **kwargs)


# ------------------------------------------------------------ processes (Linux /proc)
def wait_for(condition, seconds: float, what: str) -> None:
    """Poll ``condition()`` until true; an assertion naming ``what`` after ``seconds``."""
    import time
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"waited {seconds} s for {what}"
        time.sleep(0.05)


def process_tree(root: int) -> set[int]:
    """The pids of every descendant of ``root`` (read from /proc)."""
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    tree, grew = set(), True
    while grew:
        new = {pid for pid, ppid in parents.items() if ppid in tree | {root}} - tree
        tree |= new
        grew = bool(new)
    return tree


def running(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, dead but not yet reaped, does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def kill_and_expect_no_survivors(parent, started: set[int], seconds: float = 10) -> None:
    """SIGKILL the ``parent`` process (a Popen), then assert that none of the processes it
    ``started`` runs ``seconds`` later (any survivor is killed before the assertion fails)."""
    import os
    import signal
    parent.kill()
    parent.wait()
    try:
        wait_for(lambda: not any(map(running, started)), seconds, "the workers to exit")
    finally:
        for pid in filter(running, started):             # none, unless the test failed
            os.kill(pid, signal.SIGKILL)
