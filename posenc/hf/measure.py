"""Long forwards of Hugging Face models: token streams, memory estimates, perplexity vs length.

Perplexity uses the shared :func:`posenc.eval.perplexity.perplexity` (sliding windows with a
stride). A forward runs with ``use_cache=False`` and, for ``sdpa`` models, without a padding
mask, so PyTorch's fused causal kernel runs and no (T, T) score matrix is ever built: the
largest tensors of a long forward are the logits (T, V), not attention.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from ..errors import UserError
from ..eval.perplexity import perplexity, windows

GIB = 1024 ** 3


# ------------------------------------------------------------------ text
def corpus_texts(data: str | None = None) -> tuple[list[str], dict[str, str]]:
    """Documents to score and a description of them.

    ``data=None`` is the embedded corpus (the Python standard library source, its test
    split); a path is a text file or a folder of text files, all of which is used (the
    model was trained elsewhere, so no split is held out).
    """
    from ..data.corpora import load_corpus

    corpus = load_corpus(data)
    if data is None:
        return corpus.texts("test"), {**corpus.info(), "split": "test"}
    texts = [t for split in ("train", "validation", "test") for t in corpus.texts(split)]
    return texts, {**corpus.info(), "split": "all"}


def token_stream(tokenizer: Any, texts: Sequence[str], n_tokens: int) -> Tensor:
    """The first ``n_tokens`` tokens of the documents joined by blank lines: (n_tokens,) int64.

    Raises UserError when the texts hold fewer tokens.
    """
    ids: list[int] = []
    for text in texts:
        ids.extend(tokenizer(text + "\n\n", add_special_tokens=False)["input_ids"])
        if len(ids) >= n_tokens:
            return torch.tensor(ids[:n_tokens], dtype=torch.long)
    raise UserError(f"the text holds {len(ids)} tokens, fewer than the {n_tokens} needed; "
                     "use shorter lengths, fewer windows or more text")


# ---------------------------------------------------------------- memory
def available_memory(device: torch.device | str = "cpu") -> int:
    """Free bytes on ``device``: the GPU's free memory, or the kernel's MemAvailable."""
    from ..train.memory import available_memory as free
    return free(device)


def forward_bytes(config: Any, length: int, dtype: torch.dtype = torch.float32,
                  scored: int | None = None) -> int:
    """Estimated extra memory of one no-cache forward over ``length`` tokens, in bytes.

    Logits (T, V) plus the log-softmax of the ``scored`` rows, one layer's activations, and
    the (H, T, T) scores when the attention implementation materializes them (not sdpa).
    """
    item = torch.finfo(dtype).bits // 8
    h, kv = config.num_attention_heads, config.num_key_value_heads
    d = getattr(config, "head_dim", None) or config.hidden_size // h
    c, i, v = config.hidden_size, config.intermediate_size, config.vocab_size
    scored = length if scored is None else scored
    logits = length * v * item + scored * v * 4
    layer = length * (8 * c + 3 * i + 3 * (h + 2 * kv) * d) * item
    attn = 0 if getattr(config, "_attn_implementation", "sdpa") == "sdpa" \
        else 2 * h * length * length * item
    return int(1.2 * (logits + layer + attn))


def check_memory(config: Any, length: int, dtype: torch.dtype = torch.float32,
                 limit: int | None = None, device: torch.device | str = "cpu") -> int:
    """Raise UserError if a forward of ``length`` tokens would not fit on ``device``; return
    the estimate."""
    need = forward_bytes(config, length, dtype)
    limit = available_memory(device) if limit is None else limit
    if need > limit:
        raise UserError(f"length {length} needs about {need / GIB:.1f} GiB for one forward "
                         f"but {limit / GIB:.1f} GiB are available; use shorter lengths")
    return need


def current_rss() -> int:
    """Resident memory of this process in bytes."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        import resource
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


class PeakMemory:
    """Context manager measuring the peak resident memory of the block (bytes).

    On Linux the kernel's high-water mark is reset on entry (``/proc/self/clear_refs``) and
    read on exit (``VmHWM``), so no short spike is missed; elsewhere a thread samples the
    resident size every ``interval`` seconds. ``start`` is the resident size on entry.
    """

    def __init__(self, interval: float = 0.01) -> None:
        self.interval, self.start, self.peak = interval, 0, 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._hwm = False

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, current_rss())
            time.sleep(self.interval)

    def __enter__(self) -> PeakMemory:
        try:
            Path("/proc/self/clear_refs").write_text("5")      # reset VmHWM to VmRSS
            self._hwm = _status_bytes("VmHWM") is not None
        except OSError:
            self._hwm = False
        self.start = self.peak = current_rss()
        if not self._hwm:
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        hwm = _status_bytes("VmHWM") if self._hwm else None
        self.peak = max(self.peak, current_rss(), hwm or 0)

    @property
    def delta(self) -> int:
        return self.peak - self.start


def _status_bytes(field: str) -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


# ----------------------------------------------------------------- model
def logits_fn(model: nn.Module) -> Callable[[Tensor], Tensor]:
    """ids (1, T) -> logits (1, T, V): a no-cache, no-mask forward (fused causal sdpa)."""
    device = next(model.parameters()).device

    @torch.no_grad()
    def run(ids: Tensor) -> Tensor:
        return model(input_ids=ids.to(device), use_cache=False).logits
    return run


@dataclass(frozen=True)
class PplPoint:
    """Perplexity at one window length, with its spread over the windows.

    ``window_nll[k]`` is the mean NLL (nats/token) of the ``window_tokens[k]`` tokens window
    ``k`` scored; ``ppl_std`` is the bootstrap standard deviation of the perplexity over the
    windows (:func:`bootstrap_ppl_std`; None with a single window, or for a point measured by a
    posenc that kept no windows).
    """

    length: int
    ppl: float
    nll: float
    n_tokens: int
    n_windows: int
    seconds: float
    window_nll: tuple[float, ...] = ()
    window_tokens: tuple[int, ...] = ()
    ppl_std: float | None = None


BOOTSTRAP_RESAMPLES = 1000


def bootstrap_ppl_std(window_nll: Sequence[float], window_tokens: Sequence[int],
                      seed: int = 0, resamples: int = BOOTSTRAP_RESAMPLES) -> float | None:
    """Standard deviation of the perplexity over ``resamples`` bootstrap resamples of the
    windows (drawn with replacement, each resample's perplexity token-weighted as the point's
    own); None with fewer than two windows. Deterministic in ``seed``."""
    if len(window_nll) != len(window_tokens):
        raise ValueError("window_nll and window_tokens differ in length")
    if len(window_nll) < 2:
        return None
    nll = torch.tensor(window_nll, dtype=torch.float64)                  # (W,)
    count = torch.tensor(window_tokens, dtype=torch.float64)             # (W,)
    gen = torch.Generator().manual_seed(seed)
    pick = torch.randint(0, len(nll), (resamples, len(nll)), generator=gen)  # (R, W)
    mean = (nll[pick] * count[pick]).sum(1) / count[pick].sum(1)         # (R,)
    ppl = torch.exp(mean.clamp(max=700.0))
    std = ppl.std().item()
    return std if math.isfinite(std) else math.inf


def perplexity_vs_length(model: nn.Module, tokens: Tensor, lengths: Sequence[int],
                         stride: int | None = None, eval_windows: int | None = None,
                         progress: Callable[[int], None] | None = None,
                         memory_limit: int | None = None,
                         done: Mapping[int, PplPoint] | None = None,
                         on_point: Callable[[PplPoint], None] | None = None,
                         seed: int = 0) -> list[PplPoint]:
    """Sliding-window perplexity at each length (stride: ``stride`` or length // 2) over at
    most ``eval_windows`` windows, with each window's NLL and the bootstrap spread
    (``seed``: the resampling's).

    ``progress`` is called with 1 after each window; ``on_point`` with each finished point.
    Lengths in ``done`` (measured before an interruption) are taken from it, not measured.
    """
    fn = logits_fn(model)
    points = []
    for length in lengths:
        check_memory(model.config, length, next(model.parameters()).dtype, memory_limit,
                     next(model.parameters()).device)
        step = stride if stride is not None else max(1, length // 2)
        if step > length:
            raise UserError(f"stride {step} is longer than the window length {length}")
        if done and length in done:
            points.append(done[length])
            if progress is not None:
                progress(done[length].n_windows)
            continue
        start = time.perf_counter()
        scored = [n for _, _, n in windows(tokens.numel(), length, step, eval_windows)]
        nlls: list[float] = []
        res = perplexity(fn, tokens, length, stride=step, eval_windows=eval_windows,
                         progress=None if progress is None else (lambda _n: progress(1)),
                         on_window=lambda nll, _n: nlls.append(nll))
        points.append(PplPoint(length, res.ppl, res.nll, res.n_tokens, res.n_windows,
                               time.perf_counter() - start, tuple(nlls), tuple(scored),
                               bootstrap_ppl_std(nlls, scored, seed)))
        if on_point is not None:
            on_point(points[-1])
    return points


def n_windows(n_tokens: int, length: int, stride: int | None, eval_windows: int | None) -> int:
    """How many windows :func:`perplexity_vs_length` scores at ``length`` (a point's
    ``n_windows``; for progress bars)."""
    step = stride if stride is not None else max(1, length // 2)
    count = 1 + max(0, (n_tokens - length) // step)
    return count if eval_windows is None else min(count, eval_windows)


def tokens_needed(lengths: Sequence[int], stride: int | None, eval_windows: int) -> int:
    """Stream length that gives ``eval_windows`` windows at the longest length."""
    longest = max(lengths)
    step = stride if stride is not None else max(1, longest // 2)
    return longest + step * (eval_windows - 1)
