"""Where posenc keeps what it can rebuild: one cache folder, chosen by one environment variable.

The folder is ``$POSENC_CACHE_DIR`` if set, else ``$XDG_CACHE_HOME/posenc`` (when that is an
absolute path), else ``~/.cache/posenc``. Inside, the token cache writes ``tokens/`` and
``tokenizers/``, the
GGUF loader ``gguf/`` (dequantized models), and the native kernels their shared objects at
the top level.

This module imports nothing from posenc, so any module may use it.
"""

from __future__ import annotations

import os
from pathlib import Path

#: the environment variable that chooses the cache folder
CACHE_ENV = "POSENC_CACHE_DIR"


def cache_root() -> Path:
    """The cache folder the environment names (see the module docstring); not created.

    OSError if it names none and there is no home folder to put it in."""
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg and os.path.isabs(xdg):                 # the XDG spec ignores a relative one
        return Path(xdg) / "posenc"
    home = os.path.expanduser("~")
    if home == "~":
        raise OSError(f"no home folder for posenc's cache: set {CACHE_ENV}")
    return Path(home) / ".cache" / "posenc"


def cache_dir(*parts: str) -> Path:
    """``cache_root() / parts...``, created if missing (new folders private to the user,
    mode 0700, as the XDG base directory specification asks).

    OSError if it cannot be created (a read-only home, a file in the way)."""
    root = cache_root()
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = root.joinpath(*parts)
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    return path
