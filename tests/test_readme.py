"""Every ```python block of README.md runs as written, each in a fresh namespace (a block
cannot lean on names an earlier one defined); ```bash blocks are not run. Blocks that use
Hugging Face models build a tiny one from a config, offline."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"
FENCE = re.compile(r"^```python\n(.*?)^```", re.S | re.M)

pytestmark = pytest.mark.usefixtures("single_thread")


def python_blocks() -> list[tuple[int, str]]:
    """(line number, code) of each ```python block of the README."""
    text = README.read_text(encoding="utf-8")
    return [(text.count("\n", 0, m.start()) + 1, m.group(1)) for m in FENCE.finditer(text)]


def test_the_readme_has_python_blocks_to_run():
    assert len(python_blocks()) >= 6


@pytest.mark.parametrize("line,code", python_blocks(),
                         ids=[f"line{line}" for line, _ in python_blocks()])
def test_a_readme_block_runs_as_written(line, code):
    if "posenc.hf" in code or "transformers" in code:
        if importlib.util.find_spec("transformers") is None:
            pytest.skip("transformers is not installed")
    exec(compile(code, f"README.md:{line}", "exec"), {"__name__": f"readme_line{line}"})


def test_the_readme_gives_the_signatures_of_the_helpers_it_names():
    text = README.read_text(encoding="utf-8")
    assert "positions_from_mask(mask, start)" in text


def test_the_preset_tables_quote_the_measured_minutes_the_help_prints():
    """A preset's row in the README's table of lab presets starts its wall time with the
    minutes ``posenc compare --help`` / ``posenc tasks --help`` print (where measured)."""
    from posenc.lab.compare.presets import PRESET_MINUTES
    from posenc.lab.tasks.presets import TASK_PRESET_MINUTES
    rows = {m.group(1): m.group(2) for m in re.finditer(
        r"^\| `([a-z0-9-]+)`[^|]*\|.*\| ([^|]*) \|$", README.read_text(encoding="utf-8"), re.M)}
    for name, minutes in {**PRESET_MINUTES, **TASK_PRESET_MINUTES}.items():
        if minutes is not None and minutes >= 1:
            assert rows[name].startswith(f"{minutes:g} min"), (name, rows[name])
