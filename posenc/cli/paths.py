"""Argument types for the path options of every command.

An empty string given for a path would mean the current directory to the file system
(``--out ""`` writes into it, ``--data ""`` reads everything below it); no command wants
that, so argparse refuses it with a one-line usage error (exit 2) naming the option.
"""

from __future__ import annotations

import argparse


def path_arg(text: str) -> str:
    """A path option's value, unchanged; ArgumentTypeError if it is empty or holds a NUL."""
    if text == "":
        raise argparse.ArgumentTypeError("an empty path is not allowed (for the current "
                                         "directory write '.')")
    if "\0" in text:
        raise argparse.ArgumentTypeError("a path cannot hold a NUL character")
    return text
