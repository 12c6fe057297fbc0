"""run_study: nothing written before prepare succeeds, results after every unit, resume."""

from __future__ import annotations

import io
import json

import pytest

from posenc.errors import UserError
from posenc.study import RunDirectory, Study, StudyKind, Unit, run_study
from posenc.study.progress import StudyProgress
from posenc.study.study import InOrder

KIND = StudyKind("squares", 1, "posenc squares", ("results.json", "report.md"))


class Squares(Study):
    """A toy study: the square of each number, one unit per number."""

    kind = KIND

    def __init__(self, numbers, fail_at=None, bad_input=False):
        self.numbers, self.fail_at, self.bad_input = numbers, fail_at, bad_input
        self.ran = []

    def incomparable(self, existing):
        return None

    def prepare(self, existing):
        if self.bad_input:
            raise UserError("numbers must be positive")
        return existing or {"squares": {}}

    def plan(self, results):
        return [Unit((n,), f"square {n}", weight=n) for n in self.numbers
                if str(n) not in results["squares"]]

    def run_unit(self, unit, advance):
        (n,) = unit.key
        if n == self.fail_at:
            raise RuntimeError("killed")
        advance(1)
        self.ran.append(n)
        return n * n

    def commit(self, results, unit, result):
        results["squares"][str(unit.key[0])] = result

    def render(self, results, directory: RunDirectory, final):
        text = "\n".join(f"{k}: {v}" for k, v in results["squares"].items())
        return [directory.write("report.md", text + ("\nfinal\n" if final else "\n"))]


def test_bad_input_writes_nothing(tmp_path):
    with pytest.raises(UserError):
        run_study(Squares([1], bad_input=True), tmp_path / "out", progress=False)
    assert not (tmp_path / "out").exists()


def test_a_crash_keeps_finished_units_and_the_next_call_resumes(tmp_path):
    out = tmp_path / "out"
    with pytest.raises(RuntimeError):
        run_study(Squares([1, 2, 3], fail_at=3), out, progress=False)
    saved = json.loads((out / "results.json").read_text())
    assert saved["squares"] == {"1": 1, "2": 4}
    study = Squares([1, 2, 3, 4])
    outcome = run_study(study, out, progress=False)
    assert study.ran == [3, 4]
    assert [u.key for u in outcome.ran] == [(3,), (4,)]
    assert outcome.returned == (9, 16)
    assert outcome.results["squares"] == {"1": 1, "2": 4, "3": 9, "4": 16}
    assert (out / "report.md").read_text().endswith("final\n")
    assert outcome.paths == (out / "report.md",)


class Closing(Squares):
    """Squares with a ``close`` hook (as studies with worker processes have)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.closed = []

    def close(self, abort=False):
        self.closed.append(abort)


def test_a_study_is_closed_once_and_told_when_it_was_cut_short(tmp_path):
    done = Closing([1, 2])
    run_study(done, tmp_path / "a", progress=False)
    assert done.closed == [False]
    failed = Closing([1, 2], fail_at=2)
    with pytest.raises(RuntimeError):
        run_study(failed, tmp_path / "b", progress=False)
    assert failed.closed == [True]
    refused = Closing([1], bad_input=True)
    with pytest.raises(UserError):
        run_study(refused, tmp_path / "c", progress=False)
    assert refused.closed == [True]


class Recording(InOrder):
    """An executor that records when it was made and how it was closed."""

    def __init__(self, study, units, log):
        super().__init__(study)
        self.log = log
        log.append(("started", [u.key for u in units]))

    def close(self, abort=False):
        self.log.append(("closed", abort))


class Executed(Squares):
    """Squares whose units run through :class:`Recording`; ``plan`` is logged too."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.log = []

    def plan(self, results):
        units = super().plan(results)
        self.log.append(("planned", [u.key for u in units]))
        return units

    def executor(self, units):
        return Recording(self, units, self.log)


def test_the_driver_starts_the_executor_after_plan_and_closes_it(tmp_path):
    done = Executed([1, 2])
    run_study(done, tmp_path / "a", progress=False)
    assert done.log == [("planned", [(1,), (2,)]), ("started", [(1,), (2,)]),
                        ("closed", False)]
    failed = Executed([1, 2], fail_at=2)
    with pytest.raises(RuntimeError):
        run_study(failed, tmp_path / "b", progress=False)
    assert failed.log[-1] == ("closed", True)
    assert Squares([1]).close() is None          # the protocol's default: nothing to stop


def test_progress_off_a_terminal_prints_a_line_per_unit():
    stream = io.StringIO()
    bar = StudyProgress(10, "squares", stream=stream)
    bar.advance(4)
    bar.unit_done("square 4")
    bar.advance(6)
    bar.unit_done("square 6")
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("squares:  40% square 4 (") and "left" in lines[0]
    assert lines[1].startswith("squares: 100% square 6 (") and "left" not in lines[1]
    quiet = io.StringIO()
    off = StudyProgress(10, "squares", enabled=False, stream=quiet)
    off.advance(10)
    off.unit_done("x")
    assert quiet.getvalue() == ""
