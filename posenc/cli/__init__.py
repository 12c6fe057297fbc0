"""The ``posenc`` command: a thin layer that parses arguments and calls the library.

Each subcommand lives in a module ``cmd_<name>.py`` of this package that defines ``NAME``,
``HELP``, ``add_arguments(parser)`` and ``run(args) -> int``; they are found automatically.
Errors a user can fix (ValueError, FileNotFoundError, ...) print one line and exit 2.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys

USER_ERRORS = (ValueError, FileNotFoundError, FileExistsError, NotADirectoryError,
               PermissionError, KeyError)


def command_modules() -> list:
    """Every ``cmd_*`` module of this package, sorted by command name."""
    mods = [importlib.import_module(f"{__name__}.{m.name}")
            for m in pkgutil.iter_modules(__path__) if m.name.startswith("cmd_")]
    return sorted(mods, key=lambda m: m.NAME)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="posenc", description="Positional encodings for Transformers.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for mod in command_modules():
        p = sub.add_parser(mod.NAME, help=mod.HELP, description=mod.HELP)
        mod.add_arguments(p)
        p.set_defaults(_run=mod.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args._run(args) or 0)
    except USER_ERRORS as err:
        msg = err.args[0] if isinstance(err, KeyError) and err.args else err
        print(f"posenc {args.command}: error: {msg}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"posenc {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
