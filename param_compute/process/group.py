"""A command run in a process group of its own, ended whole: nothing it forks outlives it.

``capture --run`` runs the user's step, which may fork (a data loader, a pool, a step that
forks by mistake); ``ab`` runs each side's ``run_benchmark``. Each is started by
:func:`run_grouped` as the leader of a new session, so of a new process group (a Ctrl-C at the
terminal reaches the command that started it, not the group), and that command owns the group:

* On SIGINT, SIGTERM or SIGHUP it passes the signal on to the whole group, which has
  ``grace_s`` seconds to end (a run writes its finish line); whatever is left then is killed.
  ``timeout_s``: past it, the group is ended the same way, with SIGTERM.
* When the leader ends on its own, whatever it left running in its group is killed (and
  counted: ``GroupOutcome.leftovers``).
* While the group runs, this process is the *subreaper* of what the leader forks (Linux's
  ``PR_SET_CHILD_SUBREAPER``): the orphans are its children and it reaps them, so none is left
  as a zombie where the system's first process does not reap.
* The leader gets SIGTERM when this process dies (``lifeline.die_with_parent``, even after
  ``kill -9``); a leader that calls :func:`lead_group` passes that on to its whole group.

A process that leaves the group on purpose (``setsid``, ``setpgid``) is no longer the group's.
The leader's standard output and error are this process's own file descriptors where
``sys.stdout``/``sys.stderr`` have one, else copied into those objects (an in-process caller
that collects them), or kept in a :class:`Tail` (the last bytes only, so a flood costs nothing).
"""

from __future__ import annotations

import codecs
import ctypes
import os
import select
import signal
import stat
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Mapping, Optional, Sequence

from param_compute.files import FileRefused, read_bounded
from param_compute.process.lifeline import _PRCTL, die_with_parent

#: The signals that end a group (passed on to it).
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
#: The environment variable naming the leader's report pipe (``run_grouped(report=True)``).
REPORT_FD_ENV = "PARAM_COMPUTE_REPORT_FD"
#: The most a leader's report may hold.
REPORT_LIMIT = 4096
#: How long the processes of a killed group may take to be reaped.
_REAP_S = 10.0
_PR_SET_CHILD_SUBREAPER = 36
_PR_GET_CHILD_SUBREAPER = 37


class Tail:
    """The last ``limit`` bytes written to it (a side's standard error), as text."""

    def __init__(self, limit: int = 64 << 10):
        self.limit = limit
        self.data = bytearray()
        self.lock = threading.Lock()

    def write(self, chunk: bytes) -> None:
        with self.lock:
            self.data += chunk
            if len(self.data) > 2 * self.limit:
                del self.data[:-self.limit]

    def text(self) -> str:
        with self.lock:
            return bytes(self.data[-self.limit:]).decode("utf-8", "replace")


@dataclass
class GroupOutcome:
    """How the group ended: ``returncode`` of its leader (negative: killed by that signal, as
    ``Popen`` says), ``signum`` (the signal this process received and passed on, or None),
    ``timed_out``, ``leftovers`` (processes of the group still running when the leader had
    ended on its own: killed), and ``report`` (what the leader wrote to its report pipe)."""

    returncode: int
    signum: Optional[int] = None
    timed_out: bool = False
    leftovers: int = 0
    report: bytes = b""


class _Stop(BaseException):
    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


class _Supervisor:
    """The signal handlers and the subreaper setting while a group runs, restored after."""

    def __init__(self) -> None:
        self.started = False
        self.pending: Optional[int] = None
        self.stopping = False
        self.handlers: dict = {}
        self.reaper: Optional[int] = None

    def _handle(self, signum: int, frame) -> None:
        if self.stopping:
            return  # already ending the group: a later signal changes nothing
        if not self.started:
            self.pending = signum  # the group is being started: stopped once it is
            return
        self.stopping = True
        raise _Stop(signum)

    def __enter__(self) -> "_Supervisor":
        if threading.current_thread() is threading.main_thread():
            for signum in STOP_SIGNALS:
                self.handlers[signum] = signal.signal(signum, self._handle)
        current = _subreaper()
        if current is not None and _PRCTL(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0:
            self.reaper = current
        return self

    def __exit__(self, *exc) -> None:
        for signum, handler in self.handlers.items():
            signal.signal(signum, handler)
        if self.reaper is not None:
            _PRCTL(_PR_SET_CHILD_SUBREAPER, self.reaper, 0, 0, 0)


def _subreaper() -> Optional[int]:
    """Whether this process is a subreaper now (0 or 1), or None where that can't be set."""
    if _PRCTL is None:
        return None
    value = ctypes.c_int(0)
    if _PRCTL(_PR_GET_CHILD_SUBREAPER, ctypes.byref(value), 0, 0, 0) != 0:
        return None
    return value.value


def _pump(fd: int, write: Callable[[bytes], None]) -> threading.Thread:
    """A thread copying what arrives on ``fd`` to ``write`` until every writer has closed it."""

    def pump() -> None:
        target: Optional[Callable[[bytes], None]] = write
        try:
            while True:
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    break
                if target is not None:
                    try:
                        target(chunk)
                    except (OSError, ValueError):  # the target closed: drained, not shown
                        target = None
        finally:
            os.close(fd)

    thread = threading.Thread(target=pump, name="param_compute-group-output", daemon=True)
    thread.start()
    return thread


def _text_writer(stream) -> Callable[[bytes], None]:
    decoder = codecs.getincrementaldecoder("utf-8")("replace")

    def write(chunk: bytes) -> None:
        stream.write(decoder.decode(chunk))
        stream.flush()
    return write


def _target(sink: Optional[Tail], stream):
    """(the child's descriptor or PIPE, the writer a pipe is copied to, or None)."""
    if sink is not None:
        return subprocess.PIPE, sink.write
    try:
        stream.flush()
        return stream.fileno(), None
    except (AttributeError, OSError, ValueError):  # no descriptor: copied into the object
        return subprocess.PIPE, _text_writer(stream)


def _leader_gone(pid: int) -> bool:
    """Whether the leader has ended; it is left a zombie (its group id cannot be reused)."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def _signal_group(pgid: int, signum: int) -> None:
    try:
        os.killpg(pgid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def running_in_group(pgid: int, besides: int) -> int:
    """Processes of group ``pgid`` other than ``besides`` that are running (zombies aside),
    read from ``/proc``; 0 where it can't be read."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        return 0
    count = 0
    for entry in entries:
        if not entry.isdigit() or int(entry) == besides:
            continue
        try:
            line = bytes(read_bounded(f"/proc/{entry}/stat", 4096))
        except (FileRefused, OSError):
            continue
        fields = line[line.rfind(b")") + 2:].split()  # state, ppid, pgrp, ...
        if len(fields) > 2 and fields[2] == str(pgid).encode() and fields[0] != b"Z":
            count += 1
    return count


def _reap_group(pgid: int) -> None:
    """Reap this process's children in group ``pgid`` (killed: orphans it adopted as the
    subreaper), for at most ``_REAP_S`` seconds."""
    deadline = time.monotonic() + _REAP_S
    while time.monotonic() < deadline:
        try:
            info = os.waitid(os.P_PGID, pgid, os.WEXITED | os.WNOHANG)
        except ChildProcessError:
            return
        if info is None:
            time.sleep(0.005)


def _end(pgid: int, signum: int, grace_s: float) -> None:
    """Pass ``signum`` on to the group and wait ``grace_s`` seconds for its leader to end;
    then kill the group and wait for the leader."""
    _signal_group(pgid, signum)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and not _leader_gone(pgid):
        time.sleep(0.02)
    _signal_group(pgid, signal.SIGKILL)
    while not _leader_gone(pgid):
        time.sleep(0.005)


def _read_report(fd: int) -> bytes:
    """What the leader wrote to its report pipe (at most ``REPORT_LIMIT`` bytes)."""
    try:
        readable, _, _ = select.select([fd], [], [], 0)
        return os.read(fd, REPORT_LIMIT) if readable else b""
    except OSError:
        return b""
    finally:
        os.close(fd)


def run_grouped(command: Sequence[str], env: Optional[Mapping[str, str]] = None,
                stdout: Optional[Tail] = None, stderr: Optional[Tail] = None,
                timeout_s: Optional[float] = None, grace_s: float = 0.0,
                report: bool = False) -> GroupOutcome:
    """Run ``command`` as the leader of a new session; return once its whole group has ended.

    ``report``: the leader gets the write end of a pipe (its number in the environment as
    ``REPORT_FD_ENV``, read by :func:`report_pipe`); what it writes there is the outcome's
    ``report``. A signal received meanwhile (SIGINT, SIGTERM, SIGHUP) is passed on to the
    group, which is killed after ``grace_s`` seconds; the outcome's ``signum`` names it."""
    child_env = dict(os.environ if env is None else env)
    report_read = report_write = None
    if report:
        report_read, report_write = os.pipe()
        child_env[REPORT_FD_ENV] = str(report_write)
    out_target, out_copy = _target(stdout, sys.stdout)
    err_target, err_copy = _target(stderr, sys.stderr)
    parent = os.getpid()
    outcome = GroupOutcome(returncode=0)
    pumps: List[threading.Thread] = []
    with _Supervisor() as supervisor:
        try:
            process = subprocess.Popen(
                list(command), env=child_env, stdout=out_target, stderr=err_target,
                start_new_session=True, pass_fds=() if report_write is None else (report_write,),
                preexec_fn=lambda: die_with_parent(signal.SIGTERM, parent))
        except BaseException:
            for fd in (report_read, report_write):
                if fd is not None:
                    os.close(fd)
            raise
        if report_write is not None:
            os.close(report_write)
        for pipe, copy in ((process.stdout, out_copy), (process.stderr, err_copy)):
            if pipe is not None:
                pumps.append(_pump(os.dup(pipe.fileno()), copy))
                pipe.close()
        supervisor.started = True
        ended_on_its_own = False
        try:
            if supervisor.pending is not None:
                supervisor.stopping = True
                raise _Stop(supervisor.pending)
            deadline = None if timeout_s is None else time.monotonic() + timeout_s
            while not _leader_gone(process.pid):
                if deadline is not None and time.monotonic() > deadline:
                    supervisor.stopping = outcome.timed_out = True
                    _end(process.pid, signal.SIGTERM, grace_s)
                    break
                time.sleep(0.02)
            else:
                ended_on_its_own = True
        except _Stop as stop:
            outcome.signum = stop.signum
            _end(process.pid, stop.signum, grace_s)
        supervisor.stopping = True  # the group is ending: a late signal changes nothing
        if ended_on_its_own:
            outcome.leftovers = running_in_group(process.pid, process.pid)
        _signal_group(process.pid, signal.SIGKILL)  # whatever the leader left behind
        outcome.returncode = process.wait()
        _reap_group(process.pid)
        if report_read is not None:
            outcome.report = _read_report(report_read)
    for pump in pumps:
        pump.join(timeout=2.0)  # a process that left the group may hold a pipe open
    return outcome


def package_env() -> Dict[str, str]:
    """This process's environment with this param_compute first on ``PYTHONPATH``: a command
    started for it (another interpreter too) runs the same code."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])  # the folder holding param_compute/
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    return env


def report_pipe() -> Optional[int]:
    """In the leader: the report pipe's descriptor (taken out of the environment, and closed
    on ``exec``), or None."""
    text = os.environ.pop(REPORT_FD_ENV, "")
    if not text.isdigit():
        return None
    try:
        if not stat.S_ISFIFO(os.fstat(int(text)).st_mode):  # a stray variable: not ours
            return None
        os.set_inheritable(int(text), False)
    except OSError:
        return None
    return int(text)


def lead_group() -> None:
    """In the leader: SIGINT, SIGTERM or SIGHUP ends the whole group with that signal (the
    leader last); so does the death of the process that started it (``run_grouped`` asked the
    kernel for a SIGTERM then). A process the leader forks keeps the usual meaning of those
    signals (KeyboardInterrupt for SIGINT, else the default)."""
    leader = os.getpid()

    def end_group(signum: int, frame) -> None:
        if os.getpid() != leader:  # a copy the user's code forked: as without this handler
            if signum == signal.SIGINT:
                signal.default_int_handler(signum, frame)
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        for other in STOP_SIGNALS:
            signal.signal(other, signal.SIG_IGN)
        _signal_group(0, signum)  # every process of the group, whatever it handles
        signal.signal(signum, signal.SIG_DFL)
        os.kill(leader, signum)

    for signum in STOP_SIGNALS:
        signal.signal(signum, end_group)


def signal_name(signum: int) -> str:
    """``SIGABRT`` for 6; ``signal 77`` for a number no signal has."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"
