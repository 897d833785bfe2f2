"""A run's output paths, checked before anything runs, and the lock on its results file.

``check_outputs`` refuses (``OptionsError``, exit 2, saying which flag and why) an output that is
a directory, a symbolic link (never followed: a planted link can't redirect the results into
another file), a FIFO or device (``/dev/null`` excepted), in a directory that can't be created
or written, on a full file system; two outputs naming the same file; an output naming an input
(the spec, a peaks file). Nothing is created or truncated by the check.

``lock_results`` holds an exclusive ``flock`` on the results file for the whole run (created
empty where missing; nothing existing is truncated): a second run writing or resuming the same
file is refused with exit 2 instead of interleaving its lines. ``open_new`` opens an output for
writing the same way every sink does: ``O_NOFOLLOW`` (a link planted after the check is refused
too), ``O_EXCL`` where the name must be new. ``write_new`` writes a whole file (a captured spec, its
report) without ever writing into an existing file: into a fresh one created exclusively beside
it, then renamed over the name (a link, even a hard link, planted there is replaced, never
written through).
"""

from __future__ import annotations

import errno
import os
import secrets
import shutil
import stat
from pathlib import Path
from typing import Dict, Mapping, Optional, Union

from param_compute.errors import OptionsError

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


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
            if os.path.realpath(path) == os.devnull:
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
            if os.path.realpath(a) == os.devnull:
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
    if os.path.realpath(path) == os.devnull:
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


def open_new(path: Path, append: bool = False, exclusive: bool = False):
    """A text stream for writing an output: never through a symbolic link; ``exclusive``: the
    file must not exist yet; else truncated (or appended to) only now."""
    flags = os.O_WRONLY | os.O_CREAT | _NOFOLLOW | _CLOEXEC
    flags |= os.O_EXCL if exclusive else (os.O_APPEND if append else os.O_TRUNC)
    fd = os.open(path, flags, 0o644)
    return os.fdopen(fd, "a" if append else "w", encoding="utf-8", newline="")


def write_new(path: Path, text: Union[str, bytes]) -> None:
    """Write ``text`` as the file ``path``: into a new file beside it (a random name, created
    with ``O_EXCL | O_NOFOLLOW``), renamed over ``path`` once complete (atomic: a reader never
    sees half a file; whatever was at ``path``, a planted link included, is replaced, never
    written through)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(f".{path.name[:100]}.{secrets.token_hex(6)}.tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, 0o644)
    try:
        if isinstance(text, bytes):
            with os.fdopen(fd, "wb") as binary:
                binary.write(text)
        else:
            with os.fdopen(fd, "w", encoding="utf-8", newline="") as stream:
                stream.write(text)
        os.replace(temp, path)
    except BaseException:
        try:
            os.unlink(temp)
        except OSError:
            pass
        raise


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
