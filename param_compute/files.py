"""Every file the package reads or writes, opened one way: bounded reads, safe writes, locks.

The one owner of file I/O (a shared leaf: it imports only ``errors`` and the standard library).
Each caller passes its own limit and turns a :class:`FileRefused` into its own error (the
``error`` argument, or a ``try``), so every tool keeps its own words; the refusal says the file
and why (``code``, ``reason``; ``kind`` for a file that is no regular one).

Reading (untrusted input):

* :func:`open_regular` opens a regular file only: non-blocking (a FIFO planted at the name
  cannot block the open), checked with ``fstat`` before a byte is read (a directory, FIFO,
  socket or device such as ``/dev/zero`` is refused), then set back to blocking for the reads;
  ``follow_links=False`` refuses a symbolic link too (``O_NOFOLLOW``).
* :func:`read_bounded` reads a whole file of at most ``limit`` bytes: the size checked with
  ``fstat`` first, then at most ``limit + 1`` bytes read (a file growing meanwhile is caught);
  ``regular_only=False`` (a spec given as ``<(cat spec)``) opens blocking, so a FIFO's writer is
  waited for, and reads it within the same bound. :func:`read_at_most` is the bound on any
  stream (a decompressing one included). :func:`check_regular` checks a path without opening it;
  :func:`read_head` reads a file's first bytes (a database's header, before its driver opens it).

Writing (never through a planted link):

* :func:`open_write_fd` / :func:`open_new`: ``O_NOFOLLOW`` always, ``O_EXCL`` where the name
  must be new, non-blocking for the open (a FIFO at the name is refused, never waited on), and
  only a regular file (or ``/dev/null``) is written.
* :class:`LineFile`: a file written a whole line at a time (results files, journals); a write
  that fails (a full disk) cuts the file back to its last whole line and says so naming it.
* :func:`write_new`: a whole file, atomically: into a fresh file created exclusively beside it,
  synced, then renamed over the name (a link, even a hard link, planted there is replaced,
  never written through); on a full disk nothing is left behind, not even the temporary file.
* :func:`lock_results`: an exclusive ``flock`` on a results file for the whole run.

And a run's outputs checked before anything runs (``check_outputs``: ``OptionsError``, exit 2,
saying which flag and why): an output that is a directory, a symbolic link, a FIFO or device
(``/dev/null`` excepted), in a directory that can't be created or written, on a full file
system; two outputs naming the same file; an output naming an input. Nothing is created or
truncated by the check.
"""

from __future__ import annotations

import errno
import os
import secrets
import shutil
import stat
from pathlib import Path
from typing import Callable, Dict, List, Mapping, Optional, Union

from param_compute.errors import OptionsError

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
#: Bytes read at a time where the size is not known beforehand.
_BLOCK = 1 << 20
#: Bytes of whole lines a :class:`LineFile` holds before it writes them.
_LINE_BUFFER = 1 << 16
#: ``errno`` values that mean the file system (or the quota) is full.
_FULL_ERRNOS = frozenset(getattr(errno, name) for name in ("ENOSPC", "EDQUOT", "EFBIG")
                         if hasattr(errno, name))

PathLike = Union[str, "os.PathLike[str]"]

#: Why a file was refused (:attr:`FileRefused.code`).
MISSING, DIRECTORY, LINK, NOT_REGULAR, TOO_LARGE, UNREADABLE, FULL, UNWRITABLE = (
    "missing", "directory", "link", "not regular", "too large", "unreadable", "full",
    "unwritable")


def file_kind(mode: int) -> str:
    """What a file that is not a regular one is (``os.stat`` mode), for refusals: "a
    directory", "a FIFO", "a device", "a socket" or "not a regular file"."""
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "a socket" if stat.S_ISSOCK(mode) else "not a regular file"


class FileRefused(OSError):
    """A file not read or written: ``path``, ``code`` (``MISSING``, ``DIRECTORY``, ``LINK``,
    ``NOT_REGULAR``, ``TOO_LARGE``, ``UNREADABLE``, ``FULL``, ``UNWRITABLE``), ``reason`` (the
    words, without the path) and, for a file that is no regular one, ``kind`` ("a FIFO"...).
    ``str()`` is ``PATH: reason``; an ``OSError`` (``errno`` and ``strerror`` the system's
    where it refused, else ``reason``), so handlers of those keep working."""

    def __init__(self, path: PathLike, code: str, reason: str, kind: Optional[str] = None,
                 number: int = 0, strerror: Optional[str] = None):
        super().__init__(number, strerror or reason)
        self.path = Path(path)
        self.code = code
        self.reason = reason
        self.kind = kind

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


ErrorMaker = Callable[[FileRefused], BaseException]


def _raise(refusal: FileRefused, error: Optional[ErrorMaker]) -> None:
    if error is None:
        raise refusal
    raise error(refusal) from None


def _not_regular(path: PathLike, mode: int) -> FileRefused:
    kind = file_kind(mode)
    return FileRefused(path, DIRECTORY if stat.S_ISDIR(mode) else NOT_REGULAR,
                       f"is {kind}, not a regular file", kind)


def _open_error(path: PathLike, exc: OSError, writing: bool) -> FileRefused:
    said = {"number": exc.errno or 0, "strerror": exc.strerror}
    if isinstance(exc, FileNotFoundError):
        return FileRefused(path, MISSING, "no such file", **said)
    if isinstance(exc, IsADirectoryError):
        return FileRefused(path, DIRECTORY, "is a directory, not a regular file", "a directory",
                           **said)
    if exc.errno == errno.ELOOP:  # O_NOFOLLOW met a link
        return FileRefused(path, LINK, "is a symbolic link (links are not followed)",
                           "a symbolic link", **said)
    if writing and exc.errno == errno.ENXIO:  # a FIFO without a reader, opened non-blocking
        return FileRefused(path, NOT_REGULAR, "is a FIFO, not a regular file", "a FIFO",
                           **said)
    return FileRefused(path, UNWRITABLE if writing else UNREADABLE,
                       f"cannot {'write' if writing else 'read'}: {exc.strerror or exc}", **said)


def _open(path: PathLike, flags: int, follow_links: bool, writing: bool,
          error: Optional[ErrorMaker]) -> int:
    flags |= _CLOEXEC | (0 if follow_links else _NOFOLLOW)
    try:
        return os.open(path, flags, 0o644)
    except OSError as exc:
        _raise(_open_error(path, exc, writing), error)
        raise  # not reached


def check_regular(path: PathLike, follow_links: bool = True, missing_ok: bool = False,
                  error: Optional[ErrorMaker] = None) -> Optional[os.stat_result]:
    """The ``stat`` of ``path`` when it is a regular file (``follow_links=False``: and no
    symbolic link); None for a missing file where ``missing_ok``; else :class:`FileRefused`.
    Opens nothing (a database a driver opens, a file about to be replaced)."""
    try:
        if not follow_links and stat.S_ISLNK(os.lstat(path).st_mode):
            _raise(FileRefused(path, LINK, "is a symbolic link (links are not followed)",
                               "a symbolic link"), error)
        info = os.stat(path)
    except FileNotFoundError as exc:
        if missing_ok:
            return None
        _raise(_open_error(path, exc, False), error)
    except OSError as exc:
        if isinstance(exc, FileRefused):
            raise
        _raise(_open_error(path, exc, False), error)
    if not stat.S_ISREG(info.st_mode):
        _raise(_not_regular(path, info.st_mode), error)
    return info


def open_regular(path: PathLike, follow_links: bool = True, update: bool = False,
                 error: Optional[ErrorMaker] = None):
    """A binary stream of the regular file ``path`` (see the module's doc); ``update``: for
    reading and writing (``r+b``, a results file's torn tail cut)."""
    fd = _open(path, (os.O_RDWR if update else os.O_RDONLY) | _NONBLOCK, follow_links, False,
               error)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            _raise(_not_regular(path, mode), error)
        os.set_blocking(fd, True)  # the reads wait for data as on any file
        return os.fdopen(fd, "r+b" if update else "rb")
    except BaseException:
        os.close(fd)
        raise


def read_at_most(stream, limit: int, first: int = _BLOCK):
    """All of ``stream`` (bytes, or a bytearray where it took several reads), or None as soon
    as it holds more than ``limit`` bytes: never more than ``limit + 1`` bytes are read, a
    block at a time (``first``: the size of the first read, where the size is known)."""
    data = stream.read(min(max(first, 1), limit + 1))
    if len(data) > limit:
        return None
    if not data:
        return data
    chunk = stream.read(min(_BLOCK, limit + 1 - len(data)))
    if not chunk:
        return data  # all of it in one read: no copy
    held = bytearray(data)
    while chunk:
        held += chunk
        if len(held) > limit:
            return None
        chunk = stream.read(min(_BLOCK, limit + 1 - len(held)))
    return held


def read_head(path: PathLike, size: int, follow_links: bool = True,
              error: Optional[ErrorMaker] = None) -> bytes:
    """The first ``size`` bytes of the regular file ``path`` (fewer where it is shorter): a
    file's header, read before anything else opens it (:func:`open_regular`'s refusals)."""
    with open_regular(path, follow_links, error=error) as stream:
        try:
            return stream.read(size)
        except OSError as exc:
            _raise(_open_error(path, exc, False), error)
            raise  # not reached


def _over(path: PathLike, limit: int, size: Optional[int] = None) -> FileRefused:
    said = f"{size} bytes, over" if size is not None else "over"
    return FileRefused(path, TOO_LARGE, f"{said} the {limit}-byte limit")


def read_bounded(path: PathLike, limit: int, follow_links: bool = True,
                 regular_only: bool = True, error: Optional[ErrorMaker] = None):
    """The bytes of the file ``path``, at most ``limit`` of them (see the module's doc);
    :class:`FileRefused` (or ``error(refusal)``) for a missing, linked (``follow_links=False``),
    irregular (``regular_only``), unreadable or larger file."""
    if regular_only:
        stream = open_regular(path, follow_links, error=error)
    else:  # blocking: the open of a FIFO waits for its writer (a shell's <(...))
        fd = _open(path, os.O_RDONLY, follow_links, False, error)
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            os.close(fd)
            _raise(FileRefused(path, DIRECTORY, "is a directory", "a directory"), error)
        stream = os.fdopen(fd, "rb")
    with stream:
        info = os.fstat(stream.fileno())
        regular = stat.S_ISREG(info.st_mode)
        if regular and info.st_size > limit:
            _raise(_over(path, limit, info.st_size), error)
        try:
            data = read_at_most(stream, limit, info.st_size + 1 if regular else _BLOCK)
        except OSError as exc:
            _raise(_open_error(path, exc, False), error)
    if data is None:
        _raise(_over(path, limit), error)
    return data


# --- writing ----------------------------------------------------------------------------------

def _is_devnull(path: PathLike) -> bool:
    return os.path.realpath(path) == os.devnull


def open_write_fd(path: PathLike, append: bool = False, exclusive: bool = False,
                  truncate: Optional[bool] = None, error: Optional[ErrorMaker] = None) -> int:
    """A descriptor for writing ``path`` (created where missing, ``0o644``): never through a
    symbolic link; ``exclusive``: the name must be new (``O_EXCL``); ``append``: every write at
    its end; ``truncate`` (by default where neither): emptied now. Opened non-blocking and
    refused unless a regular file or ``/dev/null`` (a FIFO planted at the name is never waited
    on), then set back to blocking."""
    flags = os.O_WRONLY | os.O_CREAT | _NONBLOCK
    if exclusive:
        flags |= os.O_EXCL
    if append:
        flags |= os.O_APPEND
    if truncate or (truncate is None and not append and not exclusive):
        flags |= os.O_TRUNC
    fd = _open(path, flags, False, True, error)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode) and not (stat.S_ISCHR(mode) and _is_devnull(path)):
            _raise(_not_regular(path, mode), error)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_new(path: PathLike, append: bool = False, exclusive: bool = False):
    """A text stream for writing an output (:func:`open_write_fd`'s rules): ``exclusive``: the
    file must not exist yet; else truncated (or appended to) only now."""
    fd = open_write_fd(path, append, exclusive)
    return os.fdopen(fd, "a" if append else "w", encoding="utf-8", newline="")


def _write_error(path: PathLike, exc: OSError, what: str) -> FileRefused:
    said = {"number": exc.errno or 0, "strerror": exc.strerror}
    if exc.errno in _FULL_ERRNOS:
        return FileRefused(path, FULL, f"the file system is full ({exc.strerror or exc}): "
                                       f"{what}", **said)
    return FileRefused(path, UNWRITABLE, f"cannot write: {exc.strerror or exc}: {what}", **said)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def sync_fd(fd: int) -> None:
    """``fsync``; a file that cannot be synced (``/dev/null``, a read-only mount) is no error."""
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EROFS):
            raise


class LineFile:
    """A file written a whole line at a time (results files, journals), never through a
    link (:func:`open_write_fd`). ``write`` takes one encoded line; lines are held (at most
    some KiB, whole lines only) until ``flush`` writes them with one ``write``. A write that
    fails (a full disk) cuts the file back to its last whole line, drops the held lines and
    raises :class:`FileRefused` (``FULL`` or ``UNWRITABLE``) naming the file."""

    def __init__(self, path: PathLike, append: bool = True, truncate: bool = False):
        self.path = Path(path)
        self.fd: Optional[int] = open_write_fd(path, append=append, truncate=truncate)
        self.size = os.fstat(self.fd).st_size  # bytes of whole lines in the file
        self._held: List[bytes] = []
        self._held_bytes = 0

    def write(self, line: bytes, flush: bool = True) -> None:
        self._held.append(line)
        self._held_bytes += len(line)
        if flush or self._held_bytes >= _LINE_BUFFER:
            self.flush()

    def flush(self) -> None:
        if not self._held:
            return
        data = b"".join(self._held)
        count = len(self._held)
        self._held, self._held_bytes = [], 0
        try:
            _write_all(self.fd, data)
        except OSError as exc:
            try:  # no torn line left behind, and the next line written right after
                os.ftruncate(self.fd, self.size)
                os.lseek(self.fd, self.size, os.SEEK_SET)
            except OSError:
                pass
            raise _write_error(self.path, exc, f"{count} line(s) not written; the file ends at "
                                               "its last whole line") from None
        self.size += len(data)

    def sync(self) -> None:
        sync_fd(self.fd)

    def truncate(self, size: int) -> None:
        """Cut the file to ``size`` bytes (a journal's damaged tail), held lines dropped."""
        self._held, self._held_bytes = [], 0
        os.ftruncate(self.fd, size)
        os.lseek(self.fd, size, os.SEEK_SET)
        self.size = size

    def fileno(self) -> int:
        return self.fd

    @property
    def closed(self) -> bool:
        return self.fd is None

    def close(self) -> None:
        if self.fd is None:
            return
        try:
            self.flush()
        finally:
            os.close(self.fd)
            self.fd = None


def write_new(path: PathLike, text: Union[str, bytes]) -> None:
    """Write ``text`` as the file ``path``: into a new file beside it (a random name, created
    with ``O_EXCL | O_NOFOLLOW``), synced and renamed over ``path`` once complete (atomic: a
    reader never sees half a file; a regular file or a planted link at ``path`` is replaced,
    never written through). A character device (``/dev/null``) is written to, never replaced;
    any other file that is no regular one is refused (:class:`FileRefused`). A failed write
    (a full disk) removes the new file and raises :class:`FileRefused` naming ``path``, which
    is left as it was."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = text if isinstance(text, bytes) else text.encode("utf-8")
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        mode = None
    if mode is not None and stat.S_ISCHR(mode):  # /dev/null: written to, never replaced
        fd = _open(path, os.O_WRONLY, True, True, None)  # (a rename over a device node,
        try:                                            # as root, makes it a regular file)
            _write_all(fd, data)
        except OSError as exc:
            raise _write_error(path, exc, "not written") from None
        finally:
            os.close(fd)
        return
    if mode is not None and not (stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
        raise _not_regular(path, mode)  # a directory, FIFO, socket or block device: kept
    temp = path.with_name(f".{path.name[:100]}.{secrets.token_hex(6)}.tmp")
    fd = open_write_fd(temp, exclusive=True, error=lambda refused: FileRefused(
        path, refused.code, refused.reason, refused.kind, refused.errno or 0, refused.strerror))
    try:
        try:
            _write_all(fd, data)
            sync_fd(fd)
        finally:
            os.close(fd)
        os.replace(temp, path)
    except BaseException as exc:
        try:
            os.unlink(temp)
        except OSError:
            pass
        if isinstance(exc, OSError) and not isinstance(exc, FileRefused):
            raise _write_error(path, exc, "not written (the file is as it was)") from None
        raise


# --- a run's outputs, checked before anything runs -------------------------------------

def _same(a: Path, b: Path) -> bool:
    try:
        return a.exists() and b.exists() and os.path.samefile(a, b)
    except OSError:
        return False


def _nearest_existing(path: Path) -> Path:
    current = path.absolute().parent
    while not current.exists() and current != current.parent:
        current = current.parent
    return current


def check_output(flag: str, path: Path) -> None:
    """One output path (``flag`` names it in messages): see the module's doc."""
    where = f"{flag} {path}"
    if os.path.islink(path):
        raise OptionsError(f"{where}: is a symbolic link; name the file itself (links are never "
                           "followed when writing results or other outputs)")
    try:
        info = os.stat(path)
    except FileNotFoundError:
        info = None
    except OSError as exc:
        raise OptionsError(f"{where}: cannot use it: {exc.strerror or exc}") from None
    if info is not None:
        if stat.S_ISDIR(info.st_mode):
            raise OptionsError(f"{where}: is a directory; name a file")
        if not stat.S_ISREG(info.st_mode):
            if _is_devnull(path):
                return
            raise OptionsError(f"{where}: is not a regular file (a FIFO, socket or device)")
        if not os.access(path, os.W_OK):
            raise OptionsError(f"{where}: is not writable")
    parent = _nearest_existing(Path(path))
    if not parent.is_dir():
        raise OptionsError(f"{where}: {parent} is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise OptionsError(f"{where}: cannot create files in {parent}")
    try:
        if shutil.disk_usage(parent).free == 0:
            raise OptionsError(f"{where}: the file system of {parent} is full")
    except OSError:
        pass


def check_outputs(outputs: Mapping[str, Optional[Path]],
                  inputs: Mapping[str, Optional[Path]] = {}) -> None:
    """Every output on its own, then no two outputs and no output and input on one file."""
    named: Dict[str, Path] = {flag: Path(p) for flag, p in outputs.items() if p is not None}
    for flag, path in named.items():
        check_output(flag, path)
    flags = list(named)
    for i, first in enumerate(flags):
        for second in flags[i + 1:]:
            a, b = named[first], named[second]
            if _is_devnull(a):
                continue  # any number of outputs may be discarded
            if os.path.abspath(a) == os.path.abspath(b) or _same(a, b):
                raise OptionsError(f"{first} and {second} name the same file ({a}); give each "
                                   "output its own file")
    for flag, path in named.items():
        for source, given in inputs.items():
            if given is not None and (os.path.abspath(path) == os.path.abspath(given)
                                      or _same(path, Path(given))):
                raise OptionsError(f"{flag} {path} is the {source} file: writing it would "
                                   "destroy the input; choose another output")


def unused_name(path: Path) -> Path:
    """``path``, or ``path`` with ``_1``, ``_2``... before its suffix where that name is taken
    (a default results name is predictable: it must not land on an existing file or link)."""
    candidate, number = Path(path), 0
    while os.path.lexists(candidate):
        number += 1
        candidate = Path(path).with_name(f"{Path(path).stem}_{number}{Path(path).suffix}")
    return candidate


class ResultsLock:
    """The exclusive lock on one results file (see ``lock_results``); ``release`` ends it."""

    def __init__(self, path: Path, fd: Optional[int], created: bool = False):
        self.path = path
        self.fd = fd
        self.created = created  # the lock made the file: removed again if nothing was written

    def release(self) -> None:
        if self.fd is None:
            return
        try:
            if self.created and os.fstat(self.fd).st_size == 0:
                os.unlink(self.path)  # refused before writing: leave no empty file behind
        except OSError:
            pass
        os.close(self.fd)  # closing the descriptor drops the flock
        self.fd = None


def lock_results(path: Path) -> ResultsLock:
    """Lock ``path`` for this run, creating it (empty) where missing; ``OptionsError`` when
    another run holds it."""
    try:
        import fcntl
    except ImportError:  # not POSIX: no lock
        return ResultsLock(Path(path), None)
    if _is_devnull(path):
        return ResultsLock(Path(path), None)
    created = not os.path.lexists(path)
    try:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | _NOFOLLOW | _CLOEXEC, 0o644)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise OptionsError(f"--output {path}: is a symbolic link; name the file itself"
                               ) from None
        raise OptionsError(f"--output {path}: cannot write: {exc.strerror or exc}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise OptionsError(f"--output {path}: another run is writing this results file (it "
                           "holds the lock); wait for it to end or choose another --output"
                           ) from None
    except OSError:  # a file system without locks (some network mounts): go on unlocked
        pass
    return ResultsLock(Path(path), fd, created)


def write_output(flag: str, path: Path, text: Union[str, bytes],
                 inputs: Mapping[str, Optional[Path]] = {}) -> None:
    """A tool's output file (a report, a compare page), checked as a run's outputs are
    (``check_outputs``: never a link, a directory, a FIFO or an input; ``OptionsError``), then
    written whole with ``write_new``."""
    check_outputs({flag: Path(path)}, inputs)
    write_new(Path(path), text)


def open_output(flag: str, path: Path, inputs: Mapping[str, Optional[Path]] = {}):
    """A text stream for a tool's output file (a CSV), checked as ``write_output`` checks;
    opened with ``open_new`` (never through a link)."""
    check_outputs({flag: Path(path)}, inputs)
    return open_new(Path(path))
