"""Real processes for the tests, without paying for ``import torch`` in each one.

The signal, kill and lock tests need the command-line tools as separate processes: something
must receive the signal, die by ``kill -9`` or hold the lock. A fresh interpreter spends about
two seconds of CPU importing torch before it does anything, and on a 2-core machine a dozen of
them are a large part of the suite. So each pytest process keeps one *zygote*: a process that
imported torch and param_compute once (and ran no operator: no thread pool exists to be broken by
``fork``) and forks a copy of itself per request. The copy sets up its standard streams, working
directory, environment and ``sys.argv``, then runs the module or script as ``python -m`` or
``python script.py`` would, and exits with its status. It is a real process: its own pid,
signals, exit status, children and files.

What only a fresh interpreter shows (start-up, imports, the installed entry points) still starts
one: the packaging and layout tests. So do the ``--isolate`` workers the engine starts itself.

Run as a script, this file is the zygote itself. It serves requests on a Unix socket: a JSON
line, with the new process's stdin, stdout and stderr attached (``SCM_RIGHTS``); the answer is a
line with its pid. When a child ends, the zygote writes its exit status (as ``Popen.returncode``
reports it) to the request's ``status`` file. The stand-in profilers start their profiled child
through ``run_module`` when ``FAKE_PROFILER_ZYGOTE`` names this folder and the socket. The zygote
ends, killing what it started, when its stdin closes: when the test process is done or gone.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional

REPO = Path(__file__).resolve().parents[1]
#: What the zygote imports before it forks (what the tests' processes would import anyway).
PRELOAD = ("torch", "param_compute.cli.run_benchmark")


# --- the zygote process ----------------------------------------------------------------------

def _serve(address: str) -> None:
    sys.dont_write_bytecode = False
    import importlib
    for name in PRELOAD:
        importlib.import_module(name)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(address)
    listener.listen(16)
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    status_files: Dict[int, str] = {}
    while True:
        _reap(status_files)
        readable, _, _ = select.select([sys.stdin, listener], [], [], 0.01)
        if sys.stdin in readable and not os.read(sys.stdin.fileno(), 4096):
            for pid in status_files:  # the test process is gone or done: so are its processes
                _kill(pid)
            return
        if listener in readable:
            connection, _ = listener.accept()
            with connection:
                request, fds = _receive(connection)
                pid = os.fork()
                if pid == 0:
                    listener.close()
                    connection.close()
                    _child(request, fds)  # never returns
                for fd in fds:
                    os.close(fd)
                status_files[pid] = request["status"]
                connection.sendall(b"%d\n" % pid)


def _receive(connection: socket.socket):
    """One request: a JSON line, with the new process's stdin, stdout and stderr attached."""
    data, fds, _, _ = socket.recv_fds(connection, 1 << 16, 3)
    while not data.endswith(b"\n"):
        more = connection.recv(1 << 16)
        if not more:
            raise ConnectionError("a zygote request ended early")
        data += more
    return json.loads(data), fds


def _reap(status_files: Dict[int, str]) -> None:
    while status_files:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        path = status_files.pop(pid, None)
        if path is not None:
            with open(path + ".tmp", "w") as out:
                out.write(str(os.waitstatus_to_exitcode(status)))
            os.replace(path + ".tmp", path)


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _child(request: dict, fds) -> None:
    """In the forked copy: become ``python -m MODULE ARGV`` (or ``python SCRIPT ARGV``)."""
    code = 1
    try:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        tempfile.tempdir = None  # as a fresh process would: from TMPDIR at first use
        code = _run(request)
    except BaseException:  # noqa: BLE001 - a crash in the set-up: say so, as python would
        import traceback
        traceback.print_exc()
    finally:
        _exit(code)


def _run(request: dict) -> int:
    import runpy
    import traceback
    target = request["module"] or request["script"]
    sys.argv = [target, *request["argv"]]
    try:
        if request["module"]:
            runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
        else:
            sys.path.insert(0, os.path.dirname(os.path.abspath(request["script"])))
            runpy.run_path(request["script"], run_name="__main__")
    except SystemExit as stop:
        if stop.code is None or isinstance(stop.code, int):
            return stop.code or 0
        print(stop.code, file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # as python does: the traceback, then die by SIGINT
        traceback.print_exc()
        _flush()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    except BaseException:  # noqa: BLE001
        traceback.print_exc()
        return 1
    return 0


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass


def _exit(code: int) -> None:
    try:
        atexit._run_exitfuncs()  # what the interpreter runs at a normal exit
    finally:
        _flush()
        os._exit(code)


# --- the test side ---------------------------------------------------------------------------

class Forked:
    """A process forked by the zygote: the part of ``subprocess.Popen`` the tests use."""

    def __init__(self, pid: int, folder: Path, args: List[str]):
        self.pid, self.args = pid, args
        self._folder = folder
        self.returncode: Optional[int] = None

    def poll(self) -> Optional[int]:
        if self.returncode is None:
            try:
                self.returncode = int((self._folder / "status").read_text())
            except (FileNotFoundError, ValueError):
                return None
        return self.returncode

    def wait(self, timeout: Optional[float] = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(self.args, timeout)
            time.sleep(0.005)
        return self.returncode

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:
            try:
                os.kill(self.pid, signum)
            except ProcessLookupError:  # ended; the zygote has not written the status yet
                pass

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def communicate(self, timeout: Optional[float] = None):
        """(stdout, stderr) as text, after the process ended."""
        self.wait(timeout)
        return self.stdout_text(), self.stderr_text()

    def stdout_text(self) -> str:
        return (self._folder / "stdout").read_text(errors="replace")

    def stderr_text(self) -> str:
        return (self._folder / "stderr").read_text(errors="replace")


def request_fork(address: str, request: dict, fds) -> int:
    """Ask the zygote at ``address`` for a process (``fds``: its stdin, stdout, stderr); its pid."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
        connection.connect(address)
        socket.send_fds(connection, [json.dumps(request).encode() + b"\n"], list(fds))
        return int(connection.makefile("rb").readline())


def run_module(address: str, module: str, argv: List[str], env: Dict[str, str]):
    """``python -m module argv`` forked by the zygote at ``address`` with this process's
    streams and working directory, waited for: (its exit status, its pid). What the stand-in
    profilers (``fixtures/``) do with their profiled child."""
    folder = Path(tempfile.mkdtemp(prefix="param_compute_forked_"))
    try:
        request = {"module": module, "script": None, "argv": argv, "cwd": os.getcwd(),
                   "env": env, "status": str(folder / "status")}
        process = Forked(request_fork(address, request, [0, 1, 2]), folder, [module, *argv])
        return process.wait(), process.pid
    finally:
        shutil.rmtree(folder, ignore_errors=True)


class Zygote:
    """The test process's side: starts the zygote on first use, asks it for processes."""

    def __init__(self):
        self._process: Optional[subprocess.Popen] = None
        self._folder: Optional[Path] = None
        self._count = 0

    @property
    def address(self) -> str:
        """The zygote's socket (started on first use), for processes that start processes."""
        self._started()
        return str(self._folder / "socket")

    def _started(self) -> subprocess.Popen:
        if self._process is None or self._process.poll() is not None:
            # A Unix socket's path has room for about 100 bytes: a long TMPDIR falls back to /tmp.
            parent = tempfile.gettempdir()
            self._folder = Path(tempfile.mkdtemp(prefix="param_compute_zygote_",
                                                 dir=parent if len(parent) < 60 else "/tmp"))
            self._process = subprocess.Popen(
                [sys.executable, __file__, str(self._folder / "socket")], stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, cwd=REPO,
                env={k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"})
            if self._process.stdout.readline() != b"ready\n":
                raise RuntimeError("the test zygote did not start")
            atexit.register(self.close)
        return self._process

    def start(self, argv, module: str = None, script: str = None, cwd=None,
              env: Dict[str, str] = None) -> Forked:
        """A new process running ``python -m module argv`` (or ``python script argv``)."""
        address = self.address
        self._count += 1
        folder = self._folder / str(self._count)
        folder.mkdir()
        argv = [str(a) for a in argv]
        request = {"module": module, "script": script and str(script), "argv": argv,
                   "cwd": str(cwd or os.getcwd()),
                   "env": dict(os.environ if env is None else env),
                   "status": str(folder / "status")}
        streams = [os.open(os.devnull, os.O_RDONLY)] + [
            os.open(folder / name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            for name in ("stdout", "stderr")]
        try:
            pid = request_fork(address, request, streams)
        finally:
            for fd in streams:
                os.close(fd)
        return Forked(pid, folder, [module or str(script), *argv])

    def close(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.stdin.close()
            try:
                self._process.wait(10)
            except subprocess.TimeoutExpired:
                self._process.kill()
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)
        self._process = None


ZYGOTE = Zygote()


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    _serve(sys.argv[1])
