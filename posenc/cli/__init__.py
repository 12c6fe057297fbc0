"""The ``posenc`` command: a thin layer that parses arguments and calls the library.

Each subcommand lives in a module ``cmd_<name>.py`` of this package that defines ``NAME``,
``HELP``, ``add_arguments(parser)`` and ``run(args) -> int``; they are found automatically.
Errors a user can fix (:class:`~posenc.errors.UserError`) and the environment's (``OSError``:
a missing file, a full disk, a read-only folder) print one line and exit 2; a training run
that diverges prints one line and exits 3; output cut short by a closed pipe (``posenc list |
head``) ends quietly. stdout is flushed before the command returns (``--help`` and
``--version`` included), so output that cannot be written (``> /dev/full``) is one line and
exit 2 too, never an error in the interpreter's final flush. SIGTERM and SIGHUP stop a command
as Ctrl-C does (its files and lock are tidied, "interrupted" is printed) and exit 128 + the
signal's number; Ctrl-C exits 130. Anything else is a bug: its traceback is printed and the
exit is 1.
"""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import signal
import sys
from contextlib import contextmanager
from typing import NoReturn

from ..errors import UserError

USER_ERRORS = (UserError, OSError)
EXIT_USER_ERROR = 2
EXIT_DIVERGED = 3


def command_modules() -> list:
    """Every ``cmd_*`` module of this package, sorted by command name."""
    mods = [importlib.import_module(f"{__name__}.{m.name}")
            for m in pkgutil.iter_modules(__path__) if m.name.startswith("cmd_")]
    return sorted(mods, key=lambda m: m.NAME)


class Parser(argparse.ArgumentParser):
    """argparse's parser, except that a failed write of help or version text (a full disk,
    ``> /dev/full``) raises instead of being dropped silently with exit status 0."""

    def _print_message(self, message: str, file=None) -> None:
        if message:
            (file or sys.stderr).write(message)

    def error(self, message: str) -> NoReturn:
        """A usage error as every other refusal: "posenc CMD: error: ..." on one line, exit
        2 (``--help`` still prints the usage)."""
        text = " ".join(str(message).split())
        self.exit(EXIT_USER_ERROR, f"{self.prog}: error: {text} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    from .. import __version__
    parser = Parser(
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
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as done:            # --help, --version, a usage error: argparse exits
        code = finish_output("posenc", done.code if isinstance(done.code, int) else 2)
        raise SystemExit(code) from None
    except BrokenPipeError:
        raise SystemExit(quiet_closed_pipe()) from None
    except OSError as err:                # writing the help or the version failed
        print(f"posenc: error: writing the output failed: {one_line(err)}", file=sys.stderr)
        detach_stdout()
        raise SystemExit(EXIT_USER_ERROR) from None
    try:
        with stop_signals_interrupt():
            code = int(args._run(args) or 0)
        return finish_output(f"posenc {args.command}", code)
    except BrokenPipeError:
        return quiet_closed_pipe()
    except KeyboardInterrupt as err:
        by = f" by {err}" if isinstance(err, Terminated) else ""
        print(f"posenc {args.command}: interrupted{by}", file=sys.stderr)
        return 128 + int(err.signum if isinstance(err, Terminated) else signal.SIGINT)
    except USER_ERRORS as err:
        print(f"posenc {args.command}: error: {one_line(err)}", file=sys.stderr)
        detach_stdout()
        return EXIT_USER_ERROR
    except TrainingDiverged as err:
        print(f"posenc {args.command}: error: {err}", file=sys.stderr)
        return EXIT_DIVERGED


def finish_output(who: str, code: int) -> int:
    """Flush stdout now, where a failure (a full disk, ``> /dev/full``) is one line and exit
    2, rather than in the interpreter's final flush; returns the exit status."""
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        return quiet_closed_pipe()
    except OSError as err:
        print(f"{who}: error: writing the output failed: {one_line(err)}", file=sys.stderr)
        detach_stdout()
        return EXIT_USER_ERROR
    return code


def quiet_closed_pipe() -> int:
    """The reader went away (``posenc list | head``): end as a closed pipe does."""
    detach_stdout()
    return 141


def detach_stdout() -> None:
    """Point stdout at /dev/null, dropping what it still buffers, so the interpreter's final
    flush cannot fail (and print a second error) after one was reported."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):    # replaced by a test or closed
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)


def one_line(err: BaseException) -> str:
    """The message of a user or environment error on one line (an OSError with its path)."""
    text = str(err) or type(err).__name__
    return " ".join(text.split())


if __name__ == "__main__":
    sys.exit(main())
