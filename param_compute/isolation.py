"""``--isolate`` / ``--timeout``: configs run in a worker subprocess, reused while it is healthy.

Starting a worker costs seconds (it imports torch and the plugins), so one worker serves run
after run; only a worker that crashed (a segfault, an abort) or overran ``--timeout`` is replaced,
and the lost run becomes an error record ("crashed: signal 6 (SIGABRT)", "timeout after 10 s").
The worker measures with the same ``Executor`` as an in-process run, so records are identical.

Protocol over a ``multiprocessing`` pipe: the worker answers the setup with ``("ready",)``, then
each planned run (a tuple) with the record's fields, until it receives ``None``.
"""

from __future__ import annotations

import dataclasses
import logging
import multiprocessing
import signal
from types import SimpleNamespace
from typing import Any, Dict, Optional

from .expansion import PlannedRun
from .records import STATUS_ERROR, RunError, RunRecord
from .signals import exit_description

log = logging.getLogger("param_compute")

#: How long a new worker may take to import torch and the plugins and validate the spec.
STARTUP_TIMEOUT_S = 300.0


class WorkerLost(Exception):
    """The worker died or overran its time; the message says which."""


def _spec_as_dict(spec) -> Dict[str, Any]:
    return {op.name: {"build_iterator": op.build_iterator, "input_iterator": op.input_iterator,
                      "build_data_generator": op.build_data_generator,
                      "input_data_generator": op.input_data_generator,
                      "config": list(op.configs)}
            for op in spec.operators}


def _signal_text(exitcode: Optional[int]) -> str:
    return "crashed" if exitcode is None else f"crashed: {exit_description(exitcode)}"


def worker_main(connection, setup: Dict[str, Any]) -> None:
    """The worker process: rebuild the engine's state, then execute runs until told to stop."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when the run stops
    from .executor import Executor
    from .session import Toolchain

    try:
        toolchain = Toolchain.start(setup["workloads_dirs"])
        spec = toolchain.validate(setup["spec"], setup["source"])
        options = dataclasses.replace(setup["options"], isolate=False, timeout=None)
        executor = Executor(SimpleNamespace(options=options, registries=toolchain.registries,
                                            spec=spec, factories=toolchain.resolver.factory))
    except BaseException as exc:  # reported to the parent, which cannot go on without us
        connection.send(("setup failed", f"{type(exc).__name__}: {exc}"))
        return
    connection.send(("ready",))
    try:
        while True:
            message = connection.recv()
            if message is None:
                break
            record = executor.execute(PlannedRun(*message))
            connection.send(dataclasses.asdict(record))
    except EOFError:  # the parent went away
        pass
    finally:
        executor.close()


class _Worker:
    def __init__(self, context, setup: Dict[str, Any]):
        self.connection, child = context.Pipe()
        self.process = context.Process(target=worker_main, args=(child, setup),
                                       name="param_compute-worker")
        self.process.start()
        child.close()
        answer = self.receive(STARTUP_TIMEOUT_S, "starting")
        if answer[0] != "ready":
            self.kill()
            raise RuntimeError(f"the isolated worker could not start: {answer[1]}")

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

    def __init__(self, engine):
        self.options = engine.options
        workloads_dirs = sorted(source[len("dir:"):] for source in
                                engine.registries.loaded_sources if source.startswith("dir:"))
        self.setup = {"spec": _spec_as_dict(engine.spec), "source": engine.spec.source,
                      "options": engine.options, "workloads_dirs": workloads_dirs}
        self.context = multiprocessing.get_context("spawn")
        self.worker: Optional[_Worker] = None

    def execute(self, run: PlannedRun) -> RunRecord:
        if self.worker is None:
            self.worker = _Worker(self.context, self.setup)
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
