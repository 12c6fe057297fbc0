"""The project's error type for input a caller can fix, kept apart from bugs.

:class:`UserError` is raised for bad input: an argument, an option, a file's content, a name
that is not registered. The CLI prints it as one line and exits 2; an ``OSError`` (a missing
file, a full disk, a read-only folder) is the environment's and is printed the same way. Any
other exception is a bug: it keeps its traceback and the command exits 1.

``UserError`` subclasses ``ValueError``, so ``except ValueError`` in a caller's code keeps
working.
"""

from __future__ import annotations


class UserError(ValueError):
    """Bad input from the caller; the message is one line that says what to change."""
