"""``import posenc`` stays about as cheap as ``import torch``: it loads none of torch's
compiler stack (torch._dynamo, seconds of CPU), which posenc needs only when something is
compiled. The figures are in BENCHMARKS.md (benchmarks/bench_import.py); this checks the
cause, not a time."""

import subprocess
import sys


def test_import_posenc_does_not_load_the_compiler():
    code = ("import sys, posenc, posenc.hf, posenc.methods; "
            "print(sorted(m for m in sys.modules if m.startswith('torch._dynamo')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "[]"
