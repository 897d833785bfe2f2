"""``--ncu`` / ``--nsys``: the sink that replays the measured runs, in batches, under Nsight.

Nsight Compute replays every kernel many times to collect its counters, so it can't watch the main
run, whose times would be meaningless. The main run measures as usual; a ``BatchProfiler`` sink
queues each run it measured, and every ``--run-batch-size`` runs (and whenever the build or the
operator changes, and at the end) it launches one child process under the profiler that replays
exactly those runs: ``PROFILER [profiler args] python -m param_compute.profiling.batch_child
--batch-file F`` (settings and flags: :mod:`param_compute.profiling.nsight`).

* The batch goes to the child as a JSON file in a private temporary directory, removed when the
  child ends: the operator's spec entry (its generators and the one config the runs come from),
  the build config, the runs with their ids and input configs, the run options (their one JSON
  form, ``RunOptions.to_json``) and the plugin directories. The child measures the same runs,
  with the same ids and the same seed, so with the same data (data are seeded per run key), and
  writes nothing to the main results.
* In the child each measured iteration is an NVTX range ``param_compute|OP|ID|iteration|PASS``
  (domain ``param_compute``), and ncu profiles the kernels inside those ranges only.
* Each launch adds one line to the main results, in order, with PARAM's keys: ``ncu_file`` /
  ``nsys_file``, ``ncu_cmd_str`` / ``nsys_cmd_str``, ``config`` (PARAM's batch config),
  ``start_run_id``, ``end_run_id``, plus ``exit_status``, ``status`` and ``error``. A profiler
  that fails or is killed is recorded and the run goes on (exit status 1 at the end).

The sink works through the engine's declared hooks (``RecordSink``), in any place of the sink
list: a full batch is launched in ``before_run`` of the next run (or in ``end_runs``) and its
line comes back through ``pending_lines``, so it lands after its last run's line and before the
next one; ``finish_fields`` adds ``profiled_batches`` to the finish line, ``summary_lines`` the
per-profiler counts to the printed summary and ``final_status`` a failed batch to the exit
status.
This module is torch-free.
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

from param_compute.errors import EXIT_RUN_FAILED
from param_compute.files import write_new
from param_compute.plan.runplan import PlannedRun
from param_compute.plan.runkey import format_config_build, key_of
from param_compute.profiling.nsight import (BATCH_FORMAT, PROFILERS, BatchSettings, Profiler,
                                            child_options)
from param_compute.results.records import STATUS_OK, RunRecord
from param_compute.results.sinks.base import RecordSink, RunSummary
from param_compute.process.lifeline import (PARENT_PID_ENV, die_with_parent, private_directory,
                                            remove_stale_directories)
from param_compute.runtime.child import operator_entry
from param_compute.runtime.options import RunOptions
from param_compute.process.signals import Interrupted, exit_description

log = logging.getLogger("param_compute")

#: Batch directories are ``<tmp>/param_compute_batch_<pid>_*``: a killed run's are removed later.
BATCH_DIR_PREFIX = "param_compute_batch_"


def unprofiled_runs(results: Path) -> set:
    """Keys of the measured runs in a results file that no profiler batch line follows: their
    run was killed before their batch was profiled (``--resume`` profiles them again)."""
    from param_compute.results.file import (BATCH, HEADER, RECORDS, RESUME, ResultsFileError,
                                            iter_results)

    pending: List[str] = []
    uncovered: set = set()
    try:
        for line in iter_results(results):
            value = line.value
            if line.kind in RECORDS:
                if value.get("status") == STATUS_OK:
                    pending.append(key_of(value["op_name"], value["id"]))
            elif line.kind == BATCH:
                pending.clear()  # a batch line: the runs before it were profiled (or tried)
            elif line.kind in (HEADER, RESUME):
                uncovered.update(pending)  # an attempt ended without profiling these
                pending.clear()
    except (OSError, ResultsFileError):
        return set()
    return uncovered | set(pending)


def _exit_text(kind: str, status: int) -> str:
    if status < 0:
        return f"{kind} was killed by {exit_description(status)}"
    return f"{kind} exited with status {status}"


def _package_root() -> str:
    return str(Path(__file__).resolve().parents[2])


class BatchProfiler(RecordSink):
    """The ``--ncu``/``--nsys`` sink: queues measured runs, launches the profiled batches and
    makes a line per launch for the results file (``pending_lines``: the engine hands it to
    the results sink). The child rebuilds its toolchain from ``options`` (plugin folders and
    namespaces included). ``requeue``: keys of runs an earlier attempt measured but no batch
    profiled (``unprofiled_runs``); they are profiled when the resumed run skips them."""

    def __init__(self, settings: BatchSettings, spec, options: RunOptions, results: Path,
                 requeue: Iterable[str] = ()):
        self.settings = settings
        self.spec = spec
        self.options = options
        self.results = Path(results)
        self.lines: List[Dict[str, Any]] = []  # batch lines not yet handed to the engine
        self.queue: List[PlannedRun] = []
        self.batches = 0
        self.launches: Dict[str, Dict[str, int]] = {p.kind: {"ok": 0, "failed": 0}
                                                    for p in settings.profilers}
        self.failed: List[Dict[str, Any]] = []
        self.requeue = set(requeue)

    # -- RecordSink ---------------------------------------------------------------------------

    def start(self, total: Optional[int]) -> None:
        remove_stale_directories(BATCH_DIR_PREFIX)  # batches of runs that were killed

    def before_run(self, run: PlannedRun) -> None:
        """A full batch, or one of another build, is launched before the next run."""
        if self.queue and (len(self.queue) >= self.settings.batch_size
                           or run.build_key != self.queue[0].build_key):
            self.flush()

    def run_done(self, run: PlannedRun, record: Optional[RunRecord]) -> None:
        if record is not None and record.status == STATUS_OK:
            self.queue.append(run)
        elif record is None and run.key in self.requeue:
            self.requeue.discard(run.key)
            self.queue.append(run)

    def end_runs(self, summary: RunSummary) -> None:
        """The last batch (none after an interrupt: those runs are reported not profiled)."""
        if self.queue and summary.interrupted:
            log.warning("%d measured runs were not profiled: the run was interrupted",
                        len(self.queue))
            self.queue.clear()
        self.flush()

    def finish_fields(self, summary: RunSummary) -> Dict[str, Any]:
        return {"profiled_batches": {kind: dict(counts)
                                     for kind, counts in self.launches.items()}}

    def summary_lines(self, summary: RunSummary) -> List[str]:
        return [f"{kind}: {counts['ok'] + counts['failed']} batches profiled"
                + (f", {counts['failed']} failed" if counts["failed"] else "")
                for kind, counts in self.launches.items()]

    def pending_lines(self) -> List[Dict[str, Any]]:
        lines, self.lines = self.lines, []
        return lines

    def final_status(self, status: int) -> int:
        """The run's exit status, 1 where it was 0 but a profiled batch failed."""
        return EXIT_RUN_FAILED if status == 0 and self.failed else status

    # -- batches --------------------------------------------------------------------------------

    def flush(self) -> None:
        if not self.queue:
            return
        runs, self.queue = self.queue, []
        self.batches += 1
        for profiler in self.settings.profilers:
            self._profile(profiler, runs, self.batches)

    def _op_spec(self, run: PlannedRun) -> Dict[str, Any]:
        """The operator's spec entry, reduced to the one config the runs come from."""
        return operator_entry(self.spec.operators[run.op_index], run.config_index)

    def param_config(self, runs: Sequence[PlannedRun], options: RunOptions) -> Dict[str, Any]:
        """PARAM's batch ``config``: op name, build id, op info with the queued inputs (each
        with its input ``id``), run options."""
        first = runs[0]
        op_spec = self._op_spec(first)
        op_info = {key: op_spec[key] for key in ("build_iterator", "input_iterator",
                                                 "build_data_generator", "input_data_generator")}
        op_info["config"] = [{"build": first.build, "input": [
            dict(run.input, id=run.input_id) if isinstance(run.input, dict) else run.input
            for run in runs]}]
        return {"op_name": first.op_name,
                "config_build_id": format_config_build(first.config_index, first.build_id),
                "op_info": op_info, "run_options": options.to_json()}

    def batch_document(self, runs: Sequence[PlannedRun], options: RunOptions,
                       kind: str) -> Dict[str, Any]:
        """What the child reads (``run_batch``)."""
        first = runs[0]
        return {"format": BATCH_FORMAT, "profiler": kind, "op_name": first.op_name,
                "config_index": first.config_index, "build_id": first.build_id,
                "build": first.build,
                "runs": [{"id": run.id, "input_id": run.input_id, "input": run.input}
                         for run in runs],
                "op_spec": self._op_spec(first), "source": self.spec.source,
                "options": options.to_json(),
                "log_level": logging.getLevelName(log.getEffectiveLevel())}

    def output_path(self, profiler: Profiler) -> Path:
        """A new file beside the results: ``RESULTS_ncu_1.csv``, ``RESULTS_nsys_1.nsys-rep``...
        (never one an earlier, appended or resumed, run wrote)."""
        stem = self.results.with_suffix("")
        number = self.batches
        while True:
            path = Path(f"{stem}_{profiler.kind}_{number}{profiler.suffix}")
            if not path.exists():
                return path
            number += 1

    def child_command(self, batch_file: Path) -> List[str]:
        head = list(self.settings.batch_cmd) or [sys.executable, "-m",
                                                 "param_compute.profiling.batch_child"]
        return head + ["--batch-file", str(batch_file)]

    def child_env(self) -> Dict[str, str]:
        env = dict(os.environ)
        env["PYTHONUNBUFFERED"] = "1"  # the child's lines reach the log as they come
        env[PARENT_PID_ENV] = str(os.getpid())  # the profiled child ends if this run is killed
        # The child imports this very package, wherever it was imported from here.
        env["PYTHONPATH"] = os.pathsep.join(
            part for part in (_package_root(), env.get("PYTHONPATH")) if part)
        if self.settings.cuda_device is not None:
            env["CUDA_VISIBLE_DEVICES"] = self.settings.cuda_device
        return env

    def _profile(self, profiler: Profiler, runs: Sequence[PlannedRun], number: int) -> None:
        kind = profiler.kind
        options = child_options(self.options, profiler, self.settings.cuda_device)
        output = self.output_path(profiler)
        first, last = runs[0], runs[-1]
        prefix = f"[{kind} batch {number}]"
        record: Dict[str, Any] = {
            "kind": "batch", f"{kind}_file": str(output), f"{kind}_cmd_str": "", "config": None,
            "start_run_id": first.id, "end_run_id": last.id, "batch": number,
            "runs": len(runs), "batch_cuda_device": self.settings.cuda_device}
        directory = private_directory(BATCH_DIR_PREFIX)  # private (0700), named with our pid
        started = time.monotonic()
        try:
            try:
                output.parent.mkdir(parents=True, exist_ok=True)
                batch_file = directory / "batch.json"
                write_new(batch_file, json.dumps(self.batch_document(runs, options, kind)))
                command = profiler.command(output, self.child_command(batch_file))
                record[f"{kind}_cmd_str"] = shlex.join(command)
                record["config"] = self.param_config(runs, options)
            except (OSError, TypeError, ValueError) as exc:  # the batch can't be handed over
                status, error = None, f"could not prepare the batch: {exc}"
            else:
                log.info("%s %s .. %s (%d runs): %s", prefix, key_of(first.op_name, first.id),
                         last.id, len(runs), record[f"{kind}_cmd_str"])
                status, error = self._launch(command, prefix)
        except (KeyboardInterrupt, Interrupted) as stop:
            name = signal.Signals(getattr(stop, "signum", signal.SIGINT)).name
            self._record(record, None, f"interrupted by {name}", started)
            raise
        finally:
            shutil.rmtree(directory, ignore_errors=True)
        self._record(record, status, error, started)

    def _record(self, record: Dict[str, Any], status: Optional[int], error: Optional[str],
                started: float) -> None:
        kind = next(k for k in PROFILERS if f"{k}_file" in record)
        record["exit_status"] = status
        record["status"] = "ok" if status == 0 and error is None else "error"
        if error is not None:
            record["error"] = error
        record["elapsed_s"] = round(time.monotonic() - started, 3)
        counts = self.launches[kind]
        if record["status"] == "ok":
            counts["ok"] += 1
            log.info("%s result: %s", kind, record[f"{kind}_file"])
        else:
            counts["failed"] += 1
            self.failed.append(record)
            log.warning("%s batch %s .. %s failed: %s", kind, record["start_run_id"],
                        record["end_run_id"], error)
        self.lines.append(record)

    def _launch(self, command: List[str], prefix: str) -> Tuple[Optional[int], Optional[str]]:
        """Run the profiler, streaming its output (and the child's) to the log with a prefix;
        (exit status, error text or None)."""
        kind = Path(command[0]).name
        try:
            # Its own process group (killed whole), and killed by the kernel if we die.
            process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                       stderr=subprocess.STDOUT, text=True, errors="replace",
                                       bufsize=1, env=self.child_env(), start_new_session=True,
                                       preexec_fn=die_with_parent)
        except OSError as exc:
            return None, f"could not start {command[0]}: {exc.strerror or exc}"
        try:
            for line in process.stdout:
                line = line.rstrip()
                if line:
                    log.info("%s %s", prefix, line)
            status = process.wait()
        except BaseException:  # interrupted: the profiler and its child must not outlive us
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except OSError:
                process.kill()
            process.wait()
            raise
        finally:
            process.stdout.close()
        return status, None if status == 0 else _exit_text(kind, status)
