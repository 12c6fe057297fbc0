"""``posenc plot DIR``: redraw the report and figures of a study from its results.json."""

from __future__ import annotations

import argparse
from pathlib import Path

from .args import path_arg

NAME = "plot"
HELP = ("redraw the figures and report of a `posenc compare`, `posenc tasks`, `posenc "
        "extend` or `posenc arena` output directory from its results.json, without training "
        "or evaluating")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("dir", type=path_arg,
                   help="output directory of `posenc compare`, `posenc tasks`, `posenc "
                        "extend` or `posenc arena`")


def study_kinds() -> tuple:
    """Every kind of study ``posenc plot`` redraws (each knows how: ``StudyKind.redraw``)."""
    from ..hf.arena import ARENA_KIND
    from ..hf.extend_study import EXTEND_KIND
    from ..lab.compare.results import COMPARE_KIND
    from ..lab.tasks.study import KIND as TASKS_KIND
    return COMPARE_KIND, TASKS_KIND, EXTEND_KIND, ARENA_KIND


def run(args: argparse.Namespace) -> int:
    from ..study import RunDirectory, read_study_results
    out = Path(args.dir)
    kind, results = read_study_results(out, study_kinds())   # the kind its schema names
    with RunDirectory(out, kind) as directory:
        paths = kind.redraw(results, directory)
    for path in paths:
        print(f"wrote {path}")
    return 0
