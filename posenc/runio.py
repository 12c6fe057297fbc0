"""Crash-safe files and one writer per directory: the two rules every command that writes follows.

- :func:`atomic_write` / :func:`atomic_write_with` write to a temporary file next to the target,
  flush and ``fsync`` it, rename it into place and ``fsync`` the folder, so after a crash the
  target holds either the old or the new content, never a mix. Temporary files are named
  ``.<name>.<random>.tmp``; :func:`remove_stale_temporaries` deletes those a crash left
  (only names of that pattern, :func:`is_temporary`).
- :class:`DirectoryLock` is an advisory lock (``fcntl.flock``) on ``<dir>/.posenc.lock``, held
  while a command writes into ``<dir>``; a second writer gets :class:`DirectoryInUse` naming
  the holder's pid. The kernel drops the lock when its process dies (SIGKILL too), so a
  crashed run never leaves a stale lock behind. Taking the lock deletes the temporaries a
  killed writer left in the folder and in its ``atlas/`` subfolder.
- :func:`sha256_file` is the checksum recorded for checkpoints and caches.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import tempfile
from collections.abc import Callable
from pathlib import Path

from .errors import UserError

try:
    import fcntl
except ImportError:                                  # pragma: no cover - not on POSIX
    fcntl = None

LOCK_FILE = ".posenc.lock"
TMP_SUFFIX = ".tmp"
#: ``.<name>.<8 random characters of tempfile>.tmp``: what mkstemp/mkdtemp name here
_TEMPORARY = re.compile(r"^\..+\.[a-z0-9_]{8}" + re.escape(TMP_SUFFIX) + "$")
#: subfolders whose temporaries are deleted too when a folder's lock is taken
TIDIED_SUBFOLDERS = ("atlas",)


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


FILE_MODE = 0o666 & ~_umask()     # what open() would give: the umask applies
DIR_MODE = 0o777 & ~_umask()


class DirectoryInUse(UserError):
    """Another live process holds the directory's lock."""


def fsync_dir(path: str | Path) -> None:
    """Make a rename or a deletion in folder ``path`` durable (no-op where unsupported)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def fsync_file(path: str | Path) -> None:
    """Flush a file another library wrote (by path) to the disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically and durably (see the module docstring)."""
    atomic_write_with(path, lambda f: f.write(data))


def atomic_write_with(path: str | Path, write: Callable) -> None:
    """Call ``write(binary_file)`` on a temporary file next to ``path``, then rename it into
    place. IsADirectoryError (one line) if ``path`` is a folder; the temporary never stays."""
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(f"cannot write {path}: it is a directory")
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=TMP_SUFFIX)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, FILE_MODE)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def is_temporary(name: str) -> bool:
    """Whether ``name`` is a temporary written here (``.<name>.<random>.tmp``)."""
    return bool(_TEMPORARY.match(name))


def remove_stale_temporaries(folder: str | Path) -> list[Path]:
    """Delete the ``.<name>.<random>.tmp`` files (and folders) a crash left in ``folder``.
    Call it only while holding the folder's lock. Returns what was removed."""
    import shutil
    removed = []
    folder = Path(folder)
    if not folder.is_dir():
        return removed
    for p in folder.iterdir():
        if is_temporary(p.name):
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p, ignore_errors=True)
            else:
                p.unlink(missing_ok=True)
            removed.append(p)
    return removed


def has_content(folder: str | Path) -> bool:
    """Whether ``folder`` holds anything besides its lock file and crash temporaries."""
    return any(p.name != LOCK_FILE and not is_temporary(p.name)
               for p in Path(folder).iterdir())


def sha256_file(path: str | Path, chunk: int = 1 << 20) -> str:
    """Hex sha256 of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


class DirectoryLock:
    """``with DirectoryLock(folder, "posenc train"):`` holds ``folder/.posenc.lock`` exclusively.

    The folder must exist. Acquiring never blocks: a lock held by another process raises
    :class:`DirectoryInUse` with its pid. On release the lock file is deleted (acquirers check
    that the file they locked is still the one on disk, so deleting it is safe). Once held,
    the temporaries a killed writer left in the folder are deleted, and those in its
    ``subfolders`` (each taken under its own lock; one in use is left alone).
    """

    def __init__(self, folder: str | Path, command: str,
                 subfolders: tuple[str, ...] = TIDIED_SUBFOLDERS) -> None:
        self.folder = Path(folder)
        self.command = command
        self.subfolders = subfolders
        self.path = self.folder / LOCK_FILE
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> DirectoryLock:
        if self._fd is not None:
            raise RuntimeError(f"{self.path} is already held by this object")
        if fcntl is None:                             # pragma: no cover
            return self
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, FILE_MODE)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as err:
                holder = _read_holder(fd)
                os.close(fd)
                if err.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                    raise
                raise DirectoryInUse(
                    f"{self.folder} is in use by another process ({holder}); wait for it to "
                    f"finish or choose another directory") from None
            try:                                      # the file we locked may have been
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino  # released+deleted
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()} {self.command}\n".encode())
        self._fd = fd
        self._remove_temporaries()
        return self

    def _remove_temporaries(self) -> None:
        remove_stale_temporaries(self.folder)
        for name in self.subfolders:
            sub = self.folder / name
            if not sub.is_dir() or sub.is_symlink():
                continue
            try:
                with DirectoryLock(sub, self.command, subfolders=()):
                    pass                          # acquiring it removes its temporaries
            except (DirectoryInUse, OSError):
                continue                          # another writer's, or not ours to write

    def release(self) -> None:
        if self._fd is None:
            return
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
        os.close(self._fd)                            # closing drops the flock
        self._fd = None

    def __enter__(self) -> DirectoryLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def _read_holder(fd: int) -> str:
    try:
        text = os.pread(fd, 200, 0).decode(errors="replace").strip()
    except OSError:
        text = ""
    pid, _, command = text.partition(" ")
    if not pid.isdigit():
        return "pid unknown"
    return f"pid {pid}" + (f", {command}" if command else "")
