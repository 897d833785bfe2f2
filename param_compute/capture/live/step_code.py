"""The user's step for ``capture --run``: found, imported and called, each way it fails in one line.

``--run MODULE:FUNCTION``: MODULE is a module name (``steps.train``, imported as ``python -m``
would, the current directory first on the path) or a ``.py`` file (``steps/train.py``,
``/abs/x.py``; its folder goes first on the path, as for ``python steps/train.py``, and it is
imported under its file name, ``train``). A path that is no ``.py`` file (``a/b``) is refused
with the two forms. FUNCTION may be ``object.method``.

What the user's code does to the process is contained here: ``sys.exit`` (at import or in the
step), an exception of any kind (``KeyboardInterrupt`` included) becomes a :class:`StepFailed`
naming the module or the step and what happened; a process the step forks that returns from
it ends there (:func:`this_process_only`: only the capture's own process goes on capturing);
the standard streams and working directory the step changed are put back (:class:`Restored`)
before the capture writes and speaks; threads it leaves running are not waited for
(:func:`stray_threads`).
"""

from __future__ import annotations

import importlib
import importlib.util
import io
import logging
import os
import sys
import threading
from pathlib import Path
from typing import Callable, List, Optional

from param_compute.errors import EXIT_INVALID, EXIT_RUN_FAILED
from param_compute.files import FileRefused, check_regular
from param_compute.formatting import printable

log = logging.getLogger("param_compute.capture")

FORMS = "a module name (steps.train, from the current directory) or a .py file (steps/train.py)"


class StepFailed(Exception):
    """``--run``: the step could not be found, imported or run; the message says which and
    why, ``status`` is the exit status (2: ``--run`` names nothing that can run; 1: the user's
    code failed)."""

    def __init__(self, message: str, status: int = EXIT_RUN_FAILED):
        super().__init__(message)
        self.status = status


def exit_call(stop: SystemExit) -> str:
    """``sys.exit(3)``, ``sys.exit()``, ``sys.exit('bye')``: the call a ``SystemExit`` came from."""
    code = stop.code
    if code is None:
        return "sys.exit()"
    if isinstance(code, (int, str)):
        return f"sys.exit({printable(repr(code), 200)})"
    return f"sys.exit(<{type(code).__name__}>)"


def what_raised(error: BaseException) -> str:
    """``called sys.exit(3)`` or ``raised ValueError: its first line``."""
    if isinstance(error, SystemExit):
        return f"called {exit_call(error)}"
    try:
        first = (str(error).splitlines() or [""])[0]
    except Exception:  # noqa: BLE001 - an exception whose str() fails still has a type
        first = ""
    said = f": {printable(first, 500)}" if first else ""
    return f"raised {type(error).__name__}{said}"


def failure(shown: str, what: str, error: BaseException) -> StepFailed:
    log.debug("--run %s: %s", shown, what, exc_info=error)
    return StepFailed(f"--run {shown}: {what} {what_raised(error)} (-v: the traceback); "
                      "nothing written")


def load_function(target: str) -> Callable[[], object]:
    """``MODULE:FUNCTION`` (or ``MODULE:object.method``) -> the callable (:class:`StepFailed`)."""
    shown = printable(target, 300)
    module_name, sep, attribute = target.rpartition(":")
    if not sep or not module_name or not attribute:
        raise StepFailed(f"--run {shown}: write MODULE:FUNCTION, MODULE {FORMS}", EXIT_INVALID)
    if module_name.endswith(".py"):
        module, module_name = _import_file(Path(module_name), shown)
    elif all(part.isidentifier() for part in module_name.split(".")):
        module = _import_module(module_name, shown)
    else:
        raise StepFailed(f"--run {shown}: {printable(module_name, 200)} is no MODULE: write "
                         f"{FORMS}", EXIT_INVALID)
    value = module
    for part in attribute.split("."):
        try:
            value = getattr(value, part)
        except AttributeError:
            raise StepFailed(f"--run {shown}: module {printable(module_name, 200)} has no "
                             f"attribute {printable(attribute, 200)}", EXIT_INVALID) from None
        except BaseException as error:  # a property of the user's running code
            raise failure(shown, f"getting {printable(attribute, 200)}", error) from None
    if not callable(value):
        raise StepFailed(f"--run {shown}: {printable(attribute, 200)} is not callable (its "
                         f"type is {type(value).__name__})", EXIT_INVALID)
    return value


def _import_module(name: str, shown: str):
    if "" not in sys.path and str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as error:
        if error.name and (name == error.name or name.startswith(error.name + ".")):
            raise StepFailed(f"--run {shown}: no module named {printable(error.name, 200)} "
                             f"in {printable(Path.cwd(), 300)} or on the path (MODULE is "
                             f"{FORMS})", EXIT_INVALID) from None
        raise failure(shown, f"importing {name}", error) from None
    except BaseException as error:  # SystemExit, SyntaxError, KeyboardInterrupt, anything
        raise failure(shown, f"importing {name}", error) from None


def _import_file(path: Path, shown: str):
    """A ``.py`` file imported under its file name, its folder first on the path."""
    try:
        check_regular(path)
    except FileRefused as refused:
        raise StepFailed(f"--run {shown}: {printable(refused, 300)}", EXIT_INVALID) from None
    name = path.stem
    if name in sys.modules:
        raise StepFailed(f"--run {shown}: {printable(path.name, 200)} would be imported as "
                         f"{printable(name, 200)}, a module already imported: rename the "
                         "file", EXIT_INVALID)
    folder = str(path.resolve().parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise StepFailed(f"--run {shown}: cannot import {printable(path, 300)}", EXIT_INVALID)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException as error:
        sys.modules.pop(name, None)
        raise failure(shown, f"importing {printable(path, 300)}", error) from None
    return module, name


def this_process_only(function: Callable[[], object]) -> Callable[[], object]:
    """``function``, called in this process only: a copy of the process that the step forked
    and that returns from it (or raises out of it) ends there, with a line on standard error,
    instead of going on capturing beside the original."""
    owner = os.getpid()

    def step() -> object:
        try:
            result = function()
        except BaseException as error:
            if os.getpid() != owner:
                _end_copy(owner, error)
            raise
        if os.getpid() != owner:
            _end_copy(owner, None)
        return result
    return step


def _end_copy(owner: int, error: Optional[BaseException]) -> None:
    """End a forked copy of the capture's process (nothing of the capture may run twice: no
    cleanup either); a line says so, unless the copy is leaving on an interrupt."""
    if not isinstance(error, KeyboardInterrupt):
        how = "returned from it" if error is None else f"left it: {what_raised(error)}"
        try:
            os.write(2, (f"warning: process {os.getpid()}, forked by the step, {how}; ended "
                         f"there (only process {owner} captures)\n").encode(errors="replace"))
        except OSError:
            pass
    os._exit(0 if error is None else 1)


class Restored:
    """The standard streams and working directory as they were when made: ``restore()`` puts
    back descriptors 1 and 2 and ``sys.stdout``/``sys.stderr`` (a step that closed, replaced
    or redirected them), and the working directory (a step that changed it), so that the
    capture writes its files where it was asked to and says so where it was started."""

    def __init__(self) -> None:
        self.cwd = os.getcwd()
        self.streams = {"stdout": sys.stdout, "stderr": sys.stderr}
        self.fds = {}
        for fd in (1, 2):
            try:
                self.fds[fd] = os.dup(fd)
            except OSError:
                pass

    def restore(self) -> None:
        try:
            os.chdir(self.cwd)
        except OSError:
            pass
        for fd, name in ((1, "stdout"), (2, "stderr")):
            try:
                getattr(sys, name).flush()
            except Exception:  # noqa: BLE001 - a stream the step broke: replaced below
                pass
            if fd in self.fds:
                os.dup2(self.fds[fd], fd)
            stream = self.streams[name]
            if stream.closed:
                stream = io.TextIOWrapper(io.FileIO(fd, "w", closefd=False),
                                          line_buffering=True, errors="backslashreplace")
            setattr(sys, name, stream)

    def close(self) -> None:
        for fd in self.fds.values():
            os.close(fd)
        self.fds = {}


def stray_threads() -> List[threading.Thread]:
    """Threads besides the main one still running that the interpreter would wait for at
    exit (not daemons): a step's thread that never ends would keep the capture from exiting."""
    main = threading.main_thread()
    return [thread for thread in threading.enumerate()
            if thread is not main and not thread.daemon and thread.is_alive()]


def thread_names(threads: List[threading.Thread], shown: int = 3) -> Optional[str]:
    names = ", ".join(printable(thread.name, 60) for thread in threads[:shown])
    return names + (f" and {len(threads) - shown} more" if len(threads) > shown else "")
