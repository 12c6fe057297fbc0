"""llama.cpp as a client of posenc's GGUF files, through llama-cpp-python's low-level API: one
model and context per file, token ids in at chosen positions, f32 logits out, and the KV
cache's position edits (``llama_memory_seq_add`` / ``llama_memory_seq_div``) that llama.cpp's
Self-Extend makes.

The context keeps f32 keys and values, no flash attention, and 1 thread, so its logits can be
compared with posenc's fp32 model within float tolerance. Every parameter llama.cpp reads from
the file (rope type, factor, attention factor, betas) is left unset here (``-1`` / ``0``), so
the file alone decides them.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import llama_cpp as lc
import numpy as np

_quiet = lc.llama_log_callback(lambda level, text, data: None)     # kept alive here
lc.llama_log_set(_quiet, ctypes.c_void_p())
lc.llama_backend_init()


class LlamaCpp:
    """A GGUF file loaded by llama.cpp with room for ``n_ctx`` tokens in one sequence."""

    def __init__(self, path: str | Path, n_ctx: int, threads: int = 1) -> None:
        self.model = lc.llama_model_load_from_file(str(path).encode(),
                                                   lc.llama_model_default_params())
        if not self.model:
            raise RuntimeError(f"llama.cpp could not load {path}")
        params = lc.llama_context_default_params()
        params.n_ctx = params.n_batch = params.n_ubatch = n_ctx
        params.n_threads = params.n_threads_batch = threads
        params.type_k = params.type_v = lc.GGML_TYPE_F32
        params.flash_attn_type = lc.LLAMA_FLASH_ATTN_TYPE_DISABLED
        self.ctx = lc.llama_init_from_model(self.model, params)
        if not self.ctx:
            raise RuntimeError(f"llama.cpp could not make a context for {path}")
        self.n_vocab = lc.llama_vocab_n_tokens(lc.llama_model_get_vocab(self.model))
        self.memory = lc.llama_get_memory(self.ctx)

    def clear(self) -> None:
        """An empty KV cache."""
        lc.llama_memory_clear(self.memory, True)

    def decode(self, ids: list[int], positions: list[int]) -> np.ndarray:
        """Feed ``ids`` at ``positions`` (one batch, sequence 0): their logits (n, vocab)."""
        n = len(ids)
        batch = lc.llama_batch_init(n, 0, 1)
        try:
            batch.n_tokens = n
            for i, (token, pos) in enumerate(zip(ids, positions, strict=True)):
                batch.token[i], batch.pos[i] = int(token), int(pos)
                batch.n_seq_id[i], batch.seq_id[i][0], batch.logits[i] = 1, 0, 1
            rc = lc.llama_decode(self.ctx, batch)
            if rc != 0:
                raise RuntimeError(f"llama_decode returned {rc}")
            return np.stack([np.ctypeslib.as_array(lc.llama_get_logits_ith(self.ctx, i),
                                                   shape=(self.n_vocab,)).copy()
                             for i in range(n)])
        finally:
            lc.llama_batch_free(batch)

    def logits(self, ids: list[int]) -> np.ndarray:
        """Logits of ``ids`` at positions 0..n-1 from an empty cache: (n, vocab)."""
        self.clear()
        return self.decode(ids, list(range(len(ids))))

    def seq_add(self, p0: int, p1: int, delta: int) -> None:
        """Positions in [p0, p1) of the cache += delta (keys re-rotated by llama.cpp)."""
        lc.llama_memory_seq_add(self.memory, 0, p0, p1, delta)

    def seq_div(self, p0: int, p1: int, d: int) -> None:
        """Positions in [p0, p1) of the cache //= d."""
        lc.llama_memory_seq_div(self.memory, 0, p0, p1, d)

    def close(self) -> None:
        lc.llama_free(self.ctx)
        lc.llama_model_free(self.model)
