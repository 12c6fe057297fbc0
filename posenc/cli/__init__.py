"""The ``posenc`` command: a thin layer that parses arguments and calls the library.

Each subcommand lives in a module ``cmd_<name>.py`` of this package that defines ``NAME``,
``HELP``, ``add_arguments(parser)`` and ``run(args) -> int``; they are found automatically.
Errors a user can fix (:class:`~posenc.errors.UserError`) and the environment's (``OSError``:
a missing file, a full disk, a read-only folder) print one line and exit 2; a training run
that diverges prints one line and exits 3; output cut short by a closed pipe (``posenc list |
head``) ends quietly. SIGTERM and SIGHUP stop a command as Ctrl-C does (its files and lock are
tidied, "interrupted" is printed) and exit 128 + the signal's number; Ctrl-C exits 130.
Anything else is a bug: its traceback is printed and the exit is 1.
"""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import signal
import sys
from contextlib import contextmanager

from ..errors import UserError
from ..runio import DirectoryInUse

USER_ERRORS = (UserError, OSError, DirectoryInUse)     # DirectoryInUse: another writer runs
EXIT_USER_ERROR = 2
EXIT_DIVERGED = 3


def command_modules() -> list:
    """Every ``cmd_*`` module of this package, sorted by command name."""
    mods = [importlib.import_module(f"{__name__}.{m.name}")
            for m in pkgutil.iter_modules(__path__) if m.name.startswith("cmd_")]
    return sorted(mods, key=lambda m: m.NAME)


def build_parser() -> argparse.ArgumentParser:
    from .. import __version__
    parser = argparse.ArgumentParser(
        prog="posenc", description="Positional encodings for Transformers.")
    parser.add_argument("--version", action="version", version=f"posenc {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for mod in command_modules():
        p = sub.add_parser(mod.NAME, help=mod.HELP, description=mod.HELP)
        mod.add_arguments(p)
        p.set_defaults(_run=mod.run)
    return parser


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP arrived: unwinds like Ctrl-C, so every command cleans up the same."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _raise_terminated(signum: int, frame: object) -> None:
    raise Terminated(signum)


@contextmanager
def stop_signals_interrupt():
    """While inside, SIGTERM and SIGHUP raise :class:`Terminated` (main thread only)."""
    names = [n for n in ("SIGTERM", "SIGHUP") if hasattr(signal, n)]
    try:
        old = {n: signal.signal(getattr(signal, n), _raise_terminated) for n in names}
    except ValueError:                                # not the main thread: leave them
        yield
        return
    try:
        yield
    finally:
        for n, handler in old.items():
            signal.signal(getattr(signal, n), handler)


def main(argv: list[str] | None = None) -> int:
    from ..train import TrainingDiverged
    args = build_parser().parse_args(argv)
    try:
        with stop_signals_interrupt():
            code = int(args._run(args) or 0)
        sys.stdout.flush()
        return code
    except BrokenPipeError:
        # the reader went away (``posenc list | head``): point stdout at /dev/null so the
        # interpreter's final flush does not fail again, and end as a closed pipe does
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141
    except KeyboardInterrupt as err:
        by = f" by {err}" if isinstance(err, Terminated) else ""
        print(f"posenc {args.command}: interrupted{by}", file=sys.stderr)
        return 128 + int(err.signum if isinstance(err, Terminated) else signal.SIGINT)
    except USER_ERRORS as err:
        print(f"posenc {args.command}: error: {one_line(err)}", file=sys.stderr)
        return EXIT_USER_ERROR
    except TrainingDiverged as err:
        print(f"posenc {args.command}: error: {err}", file=sys.stderr)
        return EXIT_DIVERGED


def one_line(err: BaseException) -> str:
    """The message of a user or environment error on one line (an OSError with its path)."""
    text = str(err) or type(err).__name__
    return " ".join(text.split())


if __name__ == "__main__":
    sys.exit(main())
