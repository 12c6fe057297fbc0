"""``posenc lm-eval``: lm-eval's command line with the ``posenc`` model registered. The
README's command runs as written, a tiny model of native context 8192 standing in for
SmolLM2 (and lm-eval's index of its thousands of built-in tasks left out: it takes tens of
seconds to build and the command names only the task of examples/lm_eval_tasks)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from posenc.cli import main

ROOT = Path(__file__).resolve().parents[2]


def readme_command() -> list[str]:
    """The README's ``posenc lm-eval run ...`` command (continuation lines joined), split."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"^```bash\n(.*?)^```", text, re.S | re.M)
    lines = [b.replace("\\\n", " ") for b in blocks if "posenc lm-eval run" in b]
    assert len(lines) == 1, "the README shows one `posenc lm-eval run` command"
    command = next(line for line in lines[0].splitlines() if line.startswith("posenc lm-eval"))
    return shlex.split(command, comments=True)


def test_the_readme_shows_the_command_with_the_posenc_model_and_the_shipped_task():
    argv = readme_command()
    assert argv[:3] == ["posenc", "lm-eval", "run"]
    assert argv[argv.index("--model") + 1] == "posenc"
    assert "pretrained=smollm2" in argv[argv.index("--model_args") + 1]
    assert (ROOT / argv[argv.index("--include_path") + 1] / "posenc_essays.yaml").is_file()


@pytest.fixture
def lm_eval_offline(monkeypatch):
    """lm-eval imported, the hub off, lm-eval's task index without its built-in tasks, and
    its log handler (made on its command line's first run, bound to the stderr of the time)
    made again in each test and removed after it."""
    pytest.importorskip("transformers")
    pytest.importorskip("lm_eval")
    import logging

    import datasets
    import huggingface_hub
    import lm_eval.utils
    from lm_eval.tasks import TaskManager
    log = logging.getLogger("lm_eval")
    for name in ("handlers", "propagate", "level"):
        monkeypatch.setattr(log, name, getattr(log, name))
    log.handlers = list(log.handlers)
    monkeypatch.setattr(lm_eval.utils, "_LOGGING_CONFIGURED", False)
    for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
        monkeypatch.setenv(name, "1")
    monkeypatch.setattr(datasets.config, "HF_DATASETS_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    real = TaskManager.__init__

    def own_tasks_only(self, *args, include_defaults=True, **kwargs):
        real(self, *args, include_defaults=False, **kwargs)
    monkeypatch.setattr(TaskManager, "__init__", own_tasks_only)


@pytest.fixture(scope="module")
def tiny_8k(tmp_path_factory):
    pytest.importorskip("transformers")
    from tests.hf.helpers import save_tiny_model
    return save_tiny_model(tmp_path_factory.mktemp("lm_eval_cli") / "tiny", native=8192)


def test_the_readme_command_runs_as_written(lm_eval_offline, tiny_8k, monkeypatch, capsys):
    from posenc.data.essays import essays_folder
    from posenc.errors import UserError
    try:
        essays_folder()
    except UserError as err:
        pytest.skip(str(err))
    argv = [a.replace("pretrained=smollm2", f"pretrained={tiny_8k}") for a in readme_command()]
    monkeypatch.chdir(ROOT)
    capsys.readouterr()
    assert main(argv[1:]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if "|" in line]
    assert any("posenc_essays" in row for row in rows)
    values = {m.group(1): float(m.group(2)) for m in re.finditer(
        r"\|(bits_per_byte|byte_perplexity|word_perplexity)\s*\|[^|]*\|\s*([0-9.]+)\|", out)}
    assert sorted(values) == ["bits_per_byte", "byte_perplexity", "word_perplexity"]
    assert values["byte_perplexity"] > 1 and values["bits_per_byte"] > 0


def test_a_bad_method_is_one_line_and_exit_2(lm_eval_offline, tiny_8k, capsys):
    code = main(["lm-eval", "run", "--model", "posenc", "--model_args",
                 f"pretrained={tiny_8k},method=yarm,factor=4", "--tasks", "posenc_essays",
                 "--include_path", str(ROOT / "examples" / "lm_eval_tasks")])
    err = capsys.readouterr().err
    assert code == 2
    assert "posenc lm-eval: error: unknown method 'yarm'" in err and "yarn" in err
    assert "Traceback" not in err


def test_lm_evals_arguments_come_after_its_command(capsys):
    with pytest.raises(SystemExit) as done:
        main(["lm-eval", "--model", "posenc"])
    assert done.value.code == 2
    err = capsys.readouterr().err
    assert "not one of lm-eval's commands (run, ls, validate)" in err
    assert "posenc lm-eval run --model posenc" in err


def test_without_lm_eval_the_command_names_the_extra(monkeypatch, capsys):
    import importlib.util

    from posenc.cli import cmd_lm_eval
    real = importlib.util.find_spec
    monkeypatch.setattr(cmd_lm_eval.importlib.util, "find_spec",
                        lambda name, *a: None if name == "lm_eval" else real(name, *a))
    assert main(["lm-eval", "ls", "tasks"]) == 2
    assert "needs lm-eval, not installed: pip install 'posenc[lmeval]'" in \
        capsys.readouterr().err
