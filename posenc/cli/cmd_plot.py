"""``posenc plot DIR``: redraw the report and figures of a study from its results.json."""

from __future__ import annotations

import argparse
import importlib
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
    """Every kind of study ``posenc plot`` redraws (each knows how: ``StudyKind.redraw``):
    the kinds registered by the modules the study commands name in ``STUDY``."""
    from ..study import registered_kinds
    from . import command_modules
    for module in command_modules():
        if hasattr(module, "STUDY"):
            importlib.import_module(module.STUDY)      # registers its kind
    return registered_kinds()


def run(args: argparse.Namespace) -> int:
    from ..study import RunDirectory, read_study_results
    out = Path(args.dir)
    kind, results = read_study_results(out, study_kinds())   # the kind its schema names
    with RunDirectory(out, kind) as directory:
        paths = kind.redraw(results, directory)
    for path in paths:
        print(f"wrote {path}")
    return 0
