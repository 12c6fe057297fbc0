"""Importing posenc and drawing its figures leaves the user's matplotlib as it was: the
backend they chose, pyplot not imported, no figure added to pyplot's list."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

DRAW = textwrap.dedent("""
    import sys
    from pathlib import Path

    import posenc
    from posenc.atlas.absolute import sinusoidal_panel
    from posenc.hf.report import plot_passkey, plot_ppl
    from posenc.viz.plots import plot_all
    from posenc.viz.task_plots import plot_task_accuracy

    out = Path(sys.argv[1])
    run = {"encoding": "rope", "inference_scaling": None,
           "ppl": {"8": 5.0, "16": 7.0, "64": 9.0}, "curve": [[1, 3.0], [2, 2.5], [3, 2.0]],
           "entropy": {"8": {"tail": 1.0, "uniform_tail": 2.0}}}
    comparison = {"config": {"train": {"train_len": 8}}, "corpus": {},
                  "runs": [run, {**run, "inference_scaling": "yarn:8"}]}
    cell = {"mean": 0.5, "spread": 0.1}
    tasks = {"config": {"train": {"max_len": 8}, "seq2seq_train": {"max_len": 8},
                        "seeds": [0]},
             "summary": {"lm": {"copy": {"rope": {"exact_match": {"8": cell, "16": cell},
                                                   "token_accuracy": {"8": cell}}}}}}
    extension = {"model": "tiny", "native_context": 8,
                 "methods": {"none": {"ppl": [{"length": 8, "ppl": 5.0},
                                              {"length": 16, "ppl": 9.0}]}}}
    passkey = {"lengths": [8, 16], "depths": [0.0, 1.0], "accuracy": [[1.0, 0.5], [1.0, 0.0]]}
    written = [*(out / name for name in sinusoidal_panel(out).images),
               *plot_all(comparison, out),
               plot_task_accuracy(tasks, out / "tasks.png"),
               plot_ppl(extension, out / "ppl.png"),
               plot_passkey("none", passkey, out / "passkey.png")]
    assert len(written) >= 6
    assert all(p.read_bytes().startswith(b"\\x89PNG") for p in written), written
""")


def _run(tmp_path: Path, before: str, after: str) -> None:
    script = "import matplotlib\n" + before + DRAW + after
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])}
    env.pop("MPLBACKEND", None)
    proc = subprocess.run([sys.executable, "-c", script, str(tmp_path)], env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_drawing_keeps_the_backend_and_never_imports_pyplot(tmp_path):
    _run(tmp_path, "matplotlib.use('pdf')\n", textwrap.dedent("""
        assert matplotlib.get_backend() == "pdf", matplotlib.get_backend()
        assert "matplotlib.pyplot" not in sys.modules
    """))


def test_a_pyplot_user_keeps_their_backend_and_figures(tmp_path):
    _run(tmp_path, "matplotlib.use('pdf')\nimport matplotlib.pyplot as plt\nplt.figure()\n",
         textwrap.dedent("""
        assert matplotlib.get_backend() == "pdf", matplotlib.get_backend()
        assert plt.get_fignums() == [1]                 # only the user's own figure
    """))
