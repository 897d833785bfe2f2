"""``param_compute.files``, the one owner of file I/O: bounded reads that refuse FIFOs, devices,
links and oversized files with the file and the limit in the message (and never block), writes
that never go through a link, and full disks that leave no torn or temporary file behind."""

from __future__ import annotations

import errno
import os
import signal
import threading
from pathlib import Path

import pytest

from param_compute import files
from param_compute.files import (DIRECTORY, FULL, LINK, MISSING, NOT_REGULAR, TOO_LARGE,
                                 FileRefused, LineFile, check_regular, open_regular,
                                 open_write_fd, read_at_most, read_bounded, write_new)


@pytest.fixture
def no_hang():
    """Fail instead of hanging when an open or read blocks (a FIFO without a writer)."""
    def hung(signum, frame):
        raise AssertionError("blocked on a FIFO")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(10)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def refusal(call) -> FileRefused:
    with pytest.raises(FileRefused) as caught:
        call()
    return caught.value


def test_a_regular_file_is_read_whole_within_its_limit(tmp_path):
    path = tmp_path / "f.json"
    path.write_bytes(b"x" * 1000)
    assert read_bounded(path, 1000) == b"x" * 1000
    over = refusal(lambda: read_bounded(path, 999))
    assert over.code == TOO_LARGE and str(over) == f"{path}: 1000 bytes, over the 999-byte limit"


def test_a_fifo_is_refused_without_blocking_and_named(tmp_path, no_hang):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for read in (lambda: read_bounded(fifo, 100), lambda: open_regular(fifo),
                 lambda: check_regular(fifo)):
        refused = refusal(read)
        assert refused.code == NOT_REGULAR and refused.kind == "a FIFO"
        assert str(refused) == f"{fifo}: is a FIFO, not a regular file"


def test_devices_directories_and_missing_files_are_refused(tmp_path):
    device = refusal(lambda: read_bounded("/dev/zero", 100))
    assert (device.code, device.kind) == (NOT_REGULAR, "a device")
    assert str(device) == "/dev/zero: is a device, not a regular file"
    directory = refusal(lambda: read_bounded(tmp_path, 100))
    assert directory.code == DIRECTORY and "is a directory, not a regular file" in str(directory)
    missing = refusal(lambda: read_bounded(tmp_path / "none", 100))
    assert missing.code == MISSING and str(missing) == f"{tmp_path / 'none'}: no such file"
    assert missing.errno == errno.ENOENT and isinstance(missing, OSError)


def test_a_device_or_fifo_read_where_allowed_stops_at_the_limit(tmp_path):
    """``regular_only=False`` (a spec given as ``<(cat spec)``): no size to check beforehand,
    so the read itself stops one byte past the limit."""
    endless = refusal(lambda: read_bounded("/dev/zero", 4096, regular_only=False))
    assert endless.code == TOO_LARGE and str(endless) == "/dev/zero: over the 4096-byte limit"
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)

    def writer():
        with open(fifo, "wb") as stream:
            stream.write(b'{"a": 1}')

    thread = threading.Thread(target=writer)
    thread.start()
    assert read_bounded(fifo, 100, regular_only=False) == b'{"a": 1}'  # waits for its writer
    thread.join()


def test_a_link_is_refused_where_links_are_not_followed(tmp_path):
    target = tmp_path / "target"
    target.write_text("secret")
    link = tmp_path / "link"
    link.symlink_to(target)
    assert read_bounded(link, 100) == b"secret"  # followed where that is the policy
    refused = refusal(lambda: read_bounded(link, 100, follow_links=False))
    assert refused.code == LINK and str(refused) == f"{link}: is a symbolic link (links are " \
                                                    "not followed)"
    assert refusal(lambda: check_regular(link, follow_links=False)).code == LINK
    assert refusal(lambda: open_write_fd(link)).code == LINK
    assert target.read_text() == "secret"


def test_blocking_mode_is_restored_after_the_non_blocking_open(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"data")
    with open_regular(path) as stream:
        assert os.get_blocking(stream.fileno())
    fd = open_write_fd(tmp_path / "out")
    try:
        assert os.get_blocking(fd)
    finally:
        os.close(fd)


def test_each_caller_gets_its_own_error(tmp_path):
    class Mine(Exception):
        pass

    with pytest.raises(Mine, match=r"^my words: over the 2-byte limit$"):
        (tmp_path / "f").write_bytes(b"abc")
        read_bounded(tmp_path / "f", 2, error=lambda refused: Mine(
            "my words: " + refused.reason.split(", ")[-1]))


def test_a_stream_is_read_no_further_than_one_byte_past_the_limit():
    class Counting:
        read_bytes = 0

        def read(self, size):
            self.read_bytes += size
            return b"z" * size

    stream = Counting()
    assert read_at_most(stream, 10_000) is None
    assert stream.read_bytes == 10_001


def test_writing_into_a_planted_fifo_is_refused_without_blocking(tmp_path, no_hang):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    refused = refusal(lambda: open_write_fd(fifo))
    assert refused.code == NOT_REGULAR and "is a FIFO" in str(refused)


def _full_disk_after(monkeypatch, allowed: int):
    """``os.write`` that writes ``allowed`` bytes in all, then fails as a full disk does."""
    real = os.write
    left = [allowed]

    def write(fd, data):
        if left[0] <= 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        written = real(fd, bytes(data[:left[0]]))
        left[0] -= written
        return written

    monkeypatch.setattr(files.os, "write", write)


def test_an_atomic_write_on_a_full_disk_leaves_the_file_as_it_was_and_no_temporary(
        tmp_path, monkeypatch):
    path = tmp_path / "report.json"
    path.write_text("the old report\n")
    _full_disk_after(monkeypatch, 10)
    refused = refusal(lambda: write_new(path, "x" * 100_000))
    assert refused.code == FULL and refused.errno == errno.ENOSPC
    assert str(refused).startswith(f"{path}: the file system is full (No space left on device)")
    assert "the file is as it was" in str(refused)
    assert path.read_text() == "the old report\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json"]  # no temporary left


def test_an_atomic_write_replaces_a_planted_link_instead_of_writing_through_it(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep me")
    path = tmp_path / "out.json"
    path.symlink_to(victim)
    write_new(path, "new")
    assert not path.is_symlink() and path.read_text() == "new"
    assert victim.read_text() == "keep me"


def test_a_line_file_on_a_full_disk_ends_at_its_last_whole_line(tmp_path, monkeypatch):
    path = tmp_path / "lines.jsonl"
    lines = LineFile(path, append=False, truncate=True)
    lines.write(b'{"line": 1}\n')
    lines.write(b'{"line": 2}\n', flush=False)
    lines.write(b'{"line": 3}\n', flush=False)
    _full_disk_after(monkeypatch, 5)  # half a line gets out, then the disk is full
    refused = refusal(lines.flush)
    assert refused.code == FULL
    assert str(refused) == (f"{path}: the file system is full (No space left on device): 2 "
                            "line(s) not written; the file ends at its last whole line")
    assert path.read_bytes() == b'{"line": 1}\n'  # no torn line
    monkeypatch.undo()
    lines.write(b'{"line": 4}\n')
    lines.close()
    assert path.read_bytes() == b'{"line": 1}\n{"line": 4}\n'


def test_write_new_writes_to_a_device_and_never_replaces_it(tmp_path):
    """``-o /dev/null`` for a report or a captured spec: as root, a rename over the device
    node made /dev/null a regular file for every process on the machine."""
    import stat as stat_module

    from param_compute.files import FileRefused, write_new

    before = os.stat(os.devnull)
    write_new(os.devnull, "discarded\n")
    after = os.lstat(os.devnull)
    assert stat_module.S_ISCHR(after.st_mode) and after.st_rdev == before.st_rdev
    assert not list(Path("/dev").glob(".null.*.tmp"))
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(FileRefused, match="is a FIFO, not a regular file"):
        write_new(fifo, "x")
    assert stat_module.S_ISFIFO(os.lstat(fifo).st_mode)
    folder = tmp_path / "folder"
    folder.mkdir()
    with pytest.raises(FileRefused, match="is a directory"):
        write_new(folder, "x")
    assert folder.is_dir()
