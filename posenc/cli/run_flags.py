"""The flags every command that writes a run folder shares: ``--overwrite`` on ``train``,
``compare``, ``tasks``, ``extend`` and ``arena``, with one meaning.

A second run of the same command in the same ``--out`` resumes or grows what is there when
its settings are comparable, and is refused in one line naming the differing setting
otherwise; ``--overwrite`` starts over, removing only what posenc wrote there. The older
spellings stay accepted for one release, each printing one deprecation line on stderr:
``--force`` (the same as ``--overwrite``) and ``--resume`` (nothing to do: a rerun resumes).
"""

from __future__ import annotations

import argparse
import sys

#: what each deprecated flag becomes, the line it prints and its --help text
DEPRECATED = {
    "--force": ("overwrite", "--force is deprecated and will be removed; it is --overwrite",
                "deprecated: the same as --overwrite"),
    "--resume": (None, "--resume is deprecated and does nothing: a second run in the same "
                       "--out resumes by itself",
                 "deprecated and ignored: a rerun in the same --out resumes by itself"),
}


class _Deprecated(argparse.Action):
    """A deprecated flag: one line on stderr, then what it stands for (if anything)."""

    def __init__(self, option_strings, dest, **kwargs) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        sets, line, _ = DEPRECATED[option_string]
        print(f"{parser.prog}: {line}", file=sys.stderr, flush=True)
        if sets is not None:
            setattr(namespace, sets, True)


def add_run_flags(p: argparse.ArgumentParser | argparse._ArgumentGroup, what: str,
                  deprecated: tuple[str, ...] = ()) -> None:
    """``--overwrite`` (``what``: what the command writes, for the help text) and the
    ``deprecated`` flags this command accepted before (``--force``, ``--resume``)."""
    p.add_argument("--overwrite", action="store_true", default=False,
                   help=f"start over in --out, removing only what {what} wrote there "
                        "(default: a rerun with the same settings resumes or grows it, "
                        "and one with other settings is refused naming what differs)")
    for flag in deprecated:
        p.add_argument(flag, action=_Deprecated, help=DEPRECATED[flag][2])
