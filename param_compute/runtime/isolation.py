"""``--isolate`` / ``--timeout``: configs run in a worker subprocess, reused while it is healthy.

Starting a worker costs seconds (it imports torch and the plugins), so one worker serves run
after run; only a worker that crashed (a segfault, an abort) or overran ``--timeout`` is replaced,
and the lost run becomes an error record ("crashed: signal 6 (SIGABRT)", "timeout after 10 s").
The worker measures with the same ``Executor`` as an in-process run, so records are identical.

Protocol over a ``multiprocessing`` pipe: the worker answers the setup with ``("ready",)``, then
each planned run (a tuple) with the record's fields, until it receives ``None``.

The worker never outlives the run (``PR_SET_PDEATHSIG``: killed with its parent, even by
``kill -9``), and on the CPU it runs under an address-space cap (``memory_guard``): an allocation
the memory guard's estimate missed fails in the worker as a ``MemoryError`` instead of exhausting
the host. The worker rebuilds its side with ``child.ChildReplay`` from the options' one JSON form
(plugin folders and allowed namespaces included). A worker whose setup is refused (the spec or
the options, the same for every run) ends the run: ``ChildSetupError`` reaches the engine, which
says so once. A worker that crashes while starting makes its run an error record; after
``START_ATTEMPTS`` failed starts in a row the remaining runs are error records without a new try.
"""

from __future__ import annotations

import dataclasses
import logging
import multiprocessing
import os
import signal
from typing import Any, Dict, Optional

from param_compute.plan.runplan import PlannedRun
from param_compute.results.records import STATUS_ERROR, RunError, RunRecord
from param_compute.runtime.child import ChildReplay, ChildSetupError, setup, spec_entries
from param_compute.runtime.context import ExecutionContext
from param_compute.process.lifeline import die_with_parent
from param_compute.process.signals import exit_description

log = logging.getLogger("param_compute")

#: How long a new worker may take to import torch and the plugins and validate the spec.
STARTUP_TIMEOUT_S = 300.0
#: Failed worker starts in a row after which no new worker is tried.
START_ATTEMPTS = 2


class WorkerLost(Exception):
    """The worker died or overran its time; the message says which."""


def _signal_text(exitcode: Optional[int]) -> str:
    return "crashed" if exitcode is None else f"crashed: {exit_description(exitcode)}"


def worker_main(connection, given: Dict[str, Any]) -> None:
    """The worker process: its side rebuilt (``child``), then execute runs until told to stop."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when the run stops
    die_with_parent(parent=given.get("parent_pid"))
    from param_compute.runtime.memory_guard import address_space_cap, apply_address_space_cap

    try:
        replay = ChildReplay.start(given, isolate=False, timeout=None)
    except ChildSetupError as exc:  # the same for every run: the parent ends the run
        _tell(connection, ("setup failed", str(exc)))
        return
    except BaseException as exc:  # reported to the parent, which cannot go on without us
        _tell(connection, ("start failed", f"{type(exc).__name__}: {exc}"))
        return
    executor = replay.executor
    apply_address_space_cap(address_space_cap(executor.memory_limit, replay.options.device,
                                              replay.options.num_threads))
    try:
        if not _tell(connection, ("ready",)):
            return
        while True:
            message = connection.recv()
            if message is None or not _tell(connection, dataclasses.asdict(
                    replay.execute(PlannedRun(*message)))):
                break
    except EOFError:  # the parent went away
        pass
    finally:
        replay.close()


def _tell(connection, message: Any) -> bool:
    """Send ``message`` to the parent; False, quietly, when the parent is gone (a stopped run
    closed its end: nothing is left to tell, and a traceback would only be noise)."""
    try:
        connection.send(message)
        return True
    except (BrokenPipeError, ConnectionError, OSError):
        return False


class _Worker:
    def __init__(self, context, setup: Dict[str, Any]):
        self.connection, child = context.Pipe()
        self.process = context.Process(target=worker_main, args=(child, setup),
                                       name="param_compute-worker")
        self.process.start()
        child.close()
        try:
            answer = self.receive(STARTUP_TIMEOUT_S, "starting")
        except WorkerLost as lost:
            self.kill()
            raise WorkerLost(f"the isolated worker could not start: {lost}") from None
        except BaseException:  # the run stopped (SIGTERM, Ctrl-C) while the worker started
            self.kill()
            raise
        if isinstance(answer, tuple) and answer[:1] == ("setup failed",):
            self.kill()
            raise ChildSetupError(f"the isolated worker could not start: {answer[1]}")
        if not isinstance(answer, tuple) or answer[:1] != ("ready",):
            self.kill()
            raise WorkerLost(f"the isolated worker could not start: {answer[1]}")

    def receive(self, timeout: Optional[float], doing: str) -> Any:
        try:
            if not self.connection.poll(timeout):
                self.kill()
                raise WorkerLost(f"timeout after {timeout:g} s")
            return self.connection.recv()
        except (EOFError, ConnectionError, OSError):
            self.process.join(5)
            raise WorkerLost(_signal_text(self.process.exitcode)) from None

    def run(self, run: PlannedRun, timeout: Optional[float]) -> Dict[str, Any]:
        try:
            self.connection.send(tuple(run))
        except (BrokenPipeError, ConnectionError, OSError):
            self.process.join(5)
            raise WorkerLost(_signal_text(self.process.exitcode)) from None
        return self.receive(timeout, "running")

    def kill(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join(5)
        self.connection.close()

    def stop(self) -> None:
        try:
            self.connection.send(None)
            self.process.join(10)
        except (BrokenPipeError, ConnectionError, OSError):
            pass
        self.kill()


class IsolatedExecutor:
    """The engine's executor for ``--isolate``: same interface as ``executor.Executor``."""

    def __init__(self, context: ExecutionContext):
        self.options = context.options
        self.setup = dict(setup(spec_entries(context.spec), context.spec.source,
                                context.options), parent_pid=os.getpid())
        self.context = multiprocessing.get_context("spawn")
        self.worker: Optional[_Worker] = None
        self.failed_starts = 0
        self.start_failure = ""

    def execute(self, run: PlannedRun) -> RunRecord:
        if self.worker is None:
            if self.failed_starts >= START_ATTEMPTS:
                return RunRecord(run.op_name, run.id, run.config(), STATUS_ERROR, error=RunError(
                    "WorkerLost", f"not run: {self.start_failure}", "run"))
            try:
                self.worker = _Worker(self.context, self.setup)
            except WorkerLost as lost:
                self.failed_starts += 1
                self.start_failure = str(lost)
                log.warning("%s: %s", run.key, lost)
                return RunRecord(run.op_name, run.id, run.config(), STATUS_ERROR,
                                 error=RunError("WorkerLost", str(lost), "run"))
            self.failed_starts = 0
        try:
            return RunRecord.from_fields(self.worker.run(run, self.options.timeout))
        except WorkerLost as lost:
            self.worker.kill()
            self.worker = None  # the next run gets a fresh worker
            log.warning("%s: worker %s; starting a fresh one for the next run", run.key, lost)
            return RunRecord(run.op_name, run.id, run.config(), STATUS_ERROR,
                             error=RunError("WorkerLost", str(lost), "run"))

    def close(self) -> None:
        if self.worker is not None:
            self.worker.stop()
            self.worker = None
