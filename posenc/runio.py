"""Crash-safe files and one writer per directory: the two rules every command that writes follows.

- :func:`atomic_write` / :func:`atomic_write_with` / :func:`atomic_write_path` write to a
  temporary file next to the target, flush and ``fsync`` it, give it the mode the umask gives
  a new file (:func:`file_mode`, read when writing), rename it into place and ``fsync`` the
  folder, so after a crash the target holds either the old or the new content, never a mix;
  :func:`files_written_aside` does the same for every file a library writes into a folder
  (``save_pretrained``). Temporaries are named ``.posenc-tmp-<name>.<random>.tmp``
  (:func:`temporary_prefix`); :func:`remove_stale_temporaries` deletes those a crash left,
  recognised by that prefix only (:func:`is_temporary`): a user's hidden ``.x.tmp`` stays.
- :func:`announce_output`: every writer here tells the recorder of the folder it writes into
  (a study's run directory, :func:`record_outputs`) what it is about to write, so the study
  knows what it wrote and an overwrite removes that and nothing else.
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
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from .errors import UserError

try:
    import fcntl
except ImportError:                                  # pragma: no cover - not on POSIX
    fcntl = None

LOCK_FILE = ".posenc.lock"
#: the list of what a study wrote into its run directory (:mod:`posenc.study.outputs`)
OUTPUTS_FILE = ".posenc-outputs.json"
#: every temporary file or folder posenc writes starts with this, and only those are
#: deleted as a crash's leftovers
TMP_PREFIX = ".posenc-tmp-"
TMP_SUFFIX = ".tmp"
#: subfolders whose temporaries are deleted too when a folder's lock is taken
TIDIED_SUBFOLDERS = ("atlas",)

#: absolute folder -> the function told what posenc is about to write inside it
_RECORDERS: dict[str, Callable[[Path], None]] = {}


class DirectoryInUse(UserError):
    """Another live process holds the directory's lock."""


def current_umask() -> int:
    """This process's umask, read where the OS shows it (Linux), else set and put back."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def file_mode() -> int:
    """The mode ``open()`` gives a new file under the current umask (0644 under 022)."""
    return 0o666 & ~current_umask()


def dir_mode() -> int:
    """The mode ``mkdir`` gives a new folder under the current umask (0755 under 022)."""
    return 0o777 & ~current_umask()


def temporary_prefix(name: str) -> str:
    """The name prefix (for ``tempfile.mkstemp`` / ``mkdtemp``) of a temporary standing in
    for ``name``: ``.posenc-tmp-<name>.``; give it the suffix :data:`TMP_SUFFIX`."""
    return f"{TMP_PREFIX}{name}."


def is_temporary(name: str) -> bool:
    """Whether ``name`` is a temporary posenc writes (it starts with :data:`TMP_PREFIX`)."""
    return name.startswith(TMP_PREFIX)


def record_outputs(folder: str | Path, note: Callable[[Path], None]) -> Callable[[], None]:
    """Call ``note(path)`` whenever posenc is about to write ``path`` inside ``folder`` in
    this process (:func:`announce_output`); returns the function that stops it."""
    key = os.path.abspath(folder)
    _RECORDERS[key] = note

    def stop() -> None:
        if _RECORDERS.get(key) is note:
            del _RECORDERS[key]
    return stop


def announce_output(path: str | Path) -> None:
    """Say that posenc is about to write ``path`` (a file, or a folder it will own whole)
    to the recorder of a folder holding it, if any (:func:`record_outputs`)."""
    if not _RECORDERS:
        return
    full = os.path.abspath(path)
    for folder, note in list(_RECORDERS.items()):
        if full.startswith(folder + os.sep):
            note(Path(full))


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

    def write_file(tmp: Path) -> None:
        with open(tmp, "wb") as f:
            write(f)
            f.flush()
    atomic_write_path(path, write_file)


def atomic_write_path(path: str | Path, write: Callable[[Path], object]) -> Path:
    """Call ``write(temporary_path)`` (a library that writes a file by its name), then give
    the file the umask's mode, flush it and rename it to ``path``; returns ``path``.
    IsADirectoryError (one line) if ``path`` is a folder; the temporary never stays."""
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(f"cannot write {path}: it is a directory")
    announce_output(path)
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=temporary_prefix(path.name),
                                suffix=TMP_SUFFIX)
    os.close(fd)
    tmp = Path(name)
    try:
        write(tmp)
        _publish(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    fsync_dir(path.parent)
    return path


def _publish(tmp: Path, path: Path) -> None:
    """Give ``tmp`` the umask's mode, flush it to the disk and rename it to ``path``."""
    os.chmod(tmp, file_mode())
    fsync_file(tmp)
    os.replace(tmp, path)


@contextlib.contextmanager
def files_written_aside(folder: str | Path) -> Iterator[Path]:
    """``with files_written_aside(out) as tmp: model.save_pretrained(tmp)``: the files a
    library writes into ``tmp`` (a temporary folder in ``out``, which is created) are given
    the umask's mode, flushed and renamed into ``out`` one by one when the block ends
    (each atomically). The temporary folder never stays."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=folder, prefix=temporary_prefix("files"),
                                suffix=TMP_SUFFIX))
    try:
        yield tmp
        for file in sorted(p for p in tmp.rglob("*") if p.is_file()):
            target = folder / file.relative_to(tmp)
            announce_output(target)
            target.parent.mkdir(parents=True, exist_ok=True)
            _publish(file, target)
            fsync_dir(target.parent)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def remove_stale_temporaries(folder: str | Path) -> list[Path]:
    """Delete the temporaries (``.posenc-tmp-*`` files and folders) a crash left in
    ``folder``. Call it only while holding the folder's lock. Returns what was removed."""
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
    """Whether ``folder`` holds anything besides posenc's bookkeeping (its lock file, the
    list of a study's outputs) and crash temporaries."""
    return any(p.name not in (LOCK_FILE, OUTPUTS_FILE) and not is_temporary(p.name)
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
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)   # the umask applies
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
