"""Keep freed host memory in the process while training on a CPU.

A training step of the lab's small models allocates and frees tensors of a few hundred KB
to a few MB (activations, gradients, logits). glibc's malloc serves blocks above its mmap
threshold (128 KB at first, raised on the fly) with fresh ``mmap`` pages and gives the top of
its heap back to the OS past a trim threshold, so every step touches new pages: about 2,000
page faults a step at the lab's shape, 10 % of a one-thread step (BENCHMARKS.md, "Host
memory kept between steps"). :func:`keep_freed_host_memory` sets both thresholds once per
process, so freed blocks are reused by the next step instead. Numbers are unchanged; the
process keeps up to :data:`TRIM_THRESHOLD_BYTES` of freed memory instead of returning it.

Only on Linux with glibc, and only for a CPU device (routed by device type: accelerator
memory has its own caching allocator). ``POSENC_KEEP_HOST_MEMORY=0`` leaves malloc as it is.
"""

from __future__ import annotations

import ctypes
import os
import platform
import sys

import torch

#: blocks below this come from malloc's heap, not from fresh mmap pages: glibc's own upper
#: bound for its dynamic threshold on 64-bit systems (32 MiB)
MMAP_THRESHOLD_BYTES = 32 << 20
#: free memory at the top of the heap that malloc keeps instead of returning it to the OS
TRIM_THRESHOLD_BYTES = 256 << 20
#: environment variable that turns the tuning off with "0"
ENV_SWITCH = "POSENC_KEEP_HOST_MEMORY"

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3        # glibc's <malloc.h>
_applied = False


def _glibc_mallopt(option: int, value: int) -> bool:
    """glibc's ``mallopt(option, value)``; True on success."""
    return bool(ctypes.CDLL("libc.so.6").mallopt(ctypes.c_int(option), ctypes.c_int(value)))


def allocator_tunable() -> bool:
    """Whether this process's malloc is glibc's on Linux (the only one tuned here)."""
    return sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"


def keep_freed_host_memory(device: str | torch.device) -> bool:
    """For a CPU ``device``: set malloc's mmap and trim thresholds so that freed tensors'
    memory is reused by later allocations (once per process). Returns whether the thresholds
    are set now; False on another device type, another C library or with
    ``POSENC_KEEP_HOST_MEMORY=0``."""
    global _applied
    if torch.device(device).type != "cpu" or os.environ.get(ENV_SWITCH, "1") == "0":
        return False
    if _applied:
        return True
    if not allocator_tunable():
        return False
    _applied = (_glibc_mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)
                and _glibc_mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES))
    return _applied
