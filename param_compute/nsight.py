"""``--ncu`` / ``--nsys``: replay the measured runs, in batches, under Nsight Compute / Systems.

Nsight Compute replays every kernel many times to collect its counters, so it can't watch the main
run, whose times would be meaningless. The main run measures as usual; a ``BatchProfiler`` sink
queues each run it measured, and every ``--run-batch-size`` runs (and whenever the build or the
operator changes, and at the end) it launches one child process under the profiler that replays
exactly those runs: ``PROFILER [profiler args] python -m param_compute.run_batch --batch-file F``.

* The batch goes to the child as a JSON file in a private temporary directory, removed when the
  child ends: the operator's spec entry (its generators and the one config the runs come from),
  the build config, the runs with their ids and input configs, the run options and the plugin
  directories. The child measures the same runs, with the same ids and the same seed, so with the
  same data (data are seeded per run key), and writes nothing to the main results.
* In the child each measured iteration is an NVTX range ``param_compute|OP|ID|iteration|PASS``
  (domain ``param_compute``), and ncu profiles the kernels inside those ranges only.
* Each launch adds one record to the main results, in order, with PARAM's keys: ``ncu_file`` /
  ``nsys_file``, ``ncu_cmd_str`` / ``nsys_cmd_str``, ``config`` (PARAM's batch config),
  ``start_run_id``, ``end_run_id``, plus ``exit_status``, ``status`` and ``error``. A profiler
  that fails or is killed is recorded and the run goes on (exit status 1 at the end).

The sink goes *before* the results writer, and a full batch is launched when the next run (or
the end) arrives: so the batch record lands after its last run's record and before the next one.
This module is torch-free.
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import json
import logging
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from .annotations import NCU_ITERATION_FILTER
from .engine import RunSummary
from .errors import EXIT_RUN_FAILED, OptionsError
from .expansion import PlannedRun
from .options import RunOptions
from .records import STATUS_OK, RunRecord
from .signals import Interrupted, exit_description

log = logging.getLogger("param_compute")

BATCH_FORMAT = "param_compute.batch/1"
PROFILERS = ("ncu", "nsys")

#: Where Nsight Compute / Systems usually live when they are not on PATH (newest version first
#: within each pattern).
INSTALL_LOCATIONS = {
    "ncu": ("/usr/local/cuda/bin/ncu", "/usr/local/cuda-*/bin/ncu",
            "/opt/nvidia/nsight-compute/*/ncu", "/usr/local/NVIDIA-Nsight-Compute*/ncu",
            "/opt/cuda/bin/ncu"),
    "nsys": ("/usr/local/cuda/bin/nsys", "/usr/local/cuda-*/bin/nsys",
             "/opt/nvidia/nsight-systems/*/bin/nsys", "/usr/local/NVIDIA-Nsight-Systems*/bin/nsys",
             "/usr/local/cuda/nsight-systems-*/bin/nsys",
             "/usr/local/cuda-*/nsight-systems-*/bin/nsys",
             "/opt/cuda/bin/nsys"),
}
_TOOL_NAMES = {"ncu": "Nsight Compute (ncu)", "nsys": "Nsight Systems (nsys)"}
#: PARAM's defaults: ncu profiles few iterations (each costs a replay per counter pass).
DEFAULT_WARMUP = {"ncu": 5, "nsys": 5}
DEFAULT_ITERATION = {"ncu": 1, "nsys": 10}
OUTPUT_SUFFIX = {"ncu": ".csv", "nsys": ".nsys-rep"}


def _version_key(path: str) -> Tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", path))


def _executable(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


def find_binary(kind: str, explicit: Optional[str] = None) -> str:
    """The profiler to run: ``explicit`` (a path or a name on PATH), else the one on PATH, else
    the newest in the usual CUDA / Nsight install locations. Raises ``OptionsError``."""
    flag = f"--{kind}-bin"
    if explicit:
        found = explicit if os.sep in explicit else shutil.which(explicit)
        if found and _executable(found):
            return found
        raise OptionsError(f"{flag} {explicit}: no such executable")
    found = shutil.which(kind)
    if found:
        return found
    searched = []
    for pattern in INSTALL_LOCATIONS[kind]:
        searched.append(pattern)
        for candidate in sorted(glob.glob(pattern), key=_version_key, reverse=True):
            if _executable(candidate):
                return candidate
    raise OptionsError(f"--{kind}: {_TOOL_NAMES[kind]} not found on PATH nor in "
                       f"{', '.join(searched)}; install it or give its path with {flag}")


def read_args_file(path: Optional[str], flag: str) -> Tuple[str, ...]:
    """Extra profiler arguments from a file: shell words, ``#`` comments, any line layout."""
    if not path:
        return ()
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise OptionsError(f"{flag} {path}: cannot read: {exc.strerror or exc}") from None
    try:
        return tuple(shlex.split(text, comments=True))
    except ValueError as exc:
        raise OptionsError(f"{flag} {path}: {exc}") from None


@dataclass(frozen=True)
class Profiler:
    """One Nsight tool and how each batch runs under it."""

    kind: str  # "ncu" or "nsys"
    binary: str
    extra_args: Tuple[str, ...] = ()
    warmup: int = 5
    iteration: int = 1

    @property
    def suffix(self) -> str:
        return OUTPUT_SUFFIX[self.kind]

    def command(self, output: Path, child: Sequence[str]) -> List[str]:
        """The profiler's defaults, then the user's args file, then the child command."""
        if self.kind == "ncu":
            head = [self.binary, "--csv", "--log-file", str(output), "--target-processes", "all",
                    "--nvtx", "--nvtx-include", NCU_ITERATION_FILTER]
        else:
            head = [self.binary, "profile", "-t", "cuda,nvtx", "-o", str(output)]
        return head + list(self.extra_args) + list(child)


@dataclass(frozen=True)
class BatchSettings:
    profilers: Tuple[Profiler, ...]
    batch_size: int = 50
    #: CUDA_VISIBLE_DEVICES of the child; None: inherited.
    cuda_device: Optional[str] = None
    #: The child command, ``--batch-file F`` appended; empty: this interpreter's run_batch.
    batch_cmd: Tuple[str, ...] = ()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """PARAM's Nsight flags."""
    group = parser.add_argument_group(
        "Nsight profiling", "replay the measured runs in batches, each batch in a child process "
                            "under Nsight Compute (--ncu) or Nsight Systems (--nsys)")
    for kind, tool in (("ncu", "Nsight Compute"), ("nsys", "Nsight Systems")):
        group.add_argument(f"--{kind}", action="store_true",
                           help=f"profile the measured runs with {tool} in batch subprocesses")
        group.add_argument(f"--{kind}-bin", metavar="PATH",
                           help=f"the {kind} binary (default: PATH, then the usual install "
                                "locations)")
        group.add_argument(f"--{kind}-args-file", metavar="FILE",
                           help=f"extra {kind} arguments (e.g. metrics), appended to the defaults")
        group.add_argument(f"--{kind}-warmup", type=int, default=DEFAULT_WARMUP[kind], metavar="N",
                           help=f"warm-up iterations in the {kind} child (default "
                                f"{DEFAULT_WARMUP[kind]})")
        group.add_argument(f"--{kind}-iteration", type=int, default=DEFAULT_ITERATION[kind],
                           metavar="N", help=f"measured (profiled) iterations in the {kind} child "
                                             f"(default {DEFAULT_ITERATION[kind]})")
    group.add_argument("--run-batch-size", type=int, default=50, metavar="N",
                       help="runs per profiled batch (default 50); a batch never spans builds "
                            "or operators")
    group.add_argument("--batch-cuda-device", metavar="ID",
                       help="CUDA_VISIBLE_DEVICES of the batch child (default: inherited)")
    group.add_argument("--batch-cmd", metavar="CMD",
                       help="the batch child command, --batch-file F appended (default: "
                            "this python -m param_compute.run_batch)")


def settings_from_args(args: argparse.Namespace, options: RunOptions) -> Optional[BatchSettings]:
    """The batch settings of ``--ncu``/``--nsys``, checked before anything runs; None without
    them. Raises ``OptionsError`` (exit 2) for a missing binary or a bad value."""
    profilers = []
    for kind in PROFILERS:
        if not getattr(args, kind, False):
            continue
        warmup, iteration = getattr(args, f"{kind}_warmup"), getattr(args, f"{kind}_iteration")
        if warmup < 0:
            raise OptionsError(f"--{kind}-warmup must be >= 0, got {warmup}")
        if iteration < 1:
            raise OptionsError(f"--{kind}-iteration must be >= 1, got {iteration}")
        extra = read_args_file(getattr(args, f"{kind}_args_file"), f"--{kind}-args-file")
        profilers.append(Profiler(kind, find_binary(kind, getattr(args, f"{kind}_bin")), extra,
                                  warmup, iteration))
    if not profilers:
        return None
    flags = "/".join(f"--{p.kind}" for p in profilers)
    if args.run_batch_size < 1:
        raise OptionsError(f"--run-batch-size must be >= 1, got {args.run_batch_size}")
    if options.dry_run:
        raise OptionsError(f"{flags} profile measured runs; a --dry-run measures none")
    batch_cmd: Tuple[str, ...] = ()
    if args.batch_cmd is not None:
        try:
            batch_cmd = tuple(shlex.split(args.batch_cmd))
        except ValueError as exc:
            raise OptionsError(f"--batch-cmd: {exc}") from None
        if not batch_cmd:
            raise OptionsError("--batch-cmd is empty")
    if not options.device.startswith("cuda"):
        log.warning("%s on %s: the batches run, but there are no GPU kernels to profile",
                    flags, options.device)
    cuda_device = args.batch_cuda_device
    return BatchSettings(tuple(profilers), args.run_batch_size,
                         None if cuda_device in (None, "") else str(cuda_device), batch_cmd)


def child_options(options: RunOptions, profiler: Profiler,
                  cuda_device: Optional[str]) -> RunOptions:
    """The child's options: the main run's measurement settings, the profiler's iteration
    counts, NVTX per iteration, and nothing that adds work or output (no adaptive iterations,
    FLOP counting, traces, worker process)."""
    device = options.device
    if cuda_device is not None and device.startswith("cuda"):
        device = "cuda"  # the child sees only the devices in its CUDA_VISIBLE_DEVICES
    return dataclasses.replace(
        options, device=device, warmup=profiler.warmup, iteration=profiler.iteration,
        min_time=0.0, max_iteration=profiler.iteration, resume_id=None, stop_id=None,
        dry_run=False, throughput=False, profile=False, execution_trace=False, fail_fast=False,
        isolate=False, timeout=None, nvtx_iterations=True)


def options_to_json(options: RunOptions) -> Dict[str, Any]:
    """Every field as it is (``RunOptions.to_json`` renames some for PARAM)."""
    out = {f.name: getattr(options, f.name) for f in dataclasses.fields(options)}
    out["exec_mode"] = options.exec_mode.value
    return out


def options_from_json(values: Dict[str, Any]) -> RunOptions:
    known = {f.name for f in dataclasses.fields(RunOptions)}
    return RunOptions(**{k: v for k, v in values.items() if k in known})


def _exit_text(kind: str, status: int) -> str:
    if status < 0:
        return f"{kind} was killed by {exit_description(status)}"
    return f"{kind} exited with status {status}"


def _package_root() -> str:
    return str(Path(__file__).resolve().parent.parent)


class BatchProfiler:
    """The ``--ncu``/``--nsys`` sink: queues measured runs, launches the profiled batches and
    writes a record per launch into the results (through ``writer.write_line``)."""

    def __init__(self, settings: BatchSettings, spec, options: RunOptions, results: Path,
                 writer, registries=None):
        self.settings = settings
        self.spec = spec
        self.options = options
        self.results = Path(results)
        self.writer = writer
        self.workloads_dirs = sorted(
            source[len("dir:"):] for source in getattr(registries, "loaded_sources", ())
            if source.startswith("dir:"))
        self.queue: List[PlannedRun] = []
        self.batches = 0
        self.launches: Dict[str, Dict[str, int]] = {p.kind: {"ok": 0, "failed": 0}
                                                    for p in settings.profilers}
        self.failed: List[Dict[str, Any]] = []

    # -- RecordSink ---------------------------------------------------------------------------

    def start(self, total: Optional[int]) -> None:
        pass

    def run_done(self, run: PlannedRun, record: Optional[RunRecord]) -> None:
        if self.queue and (len(self.queue) >= self.settings.batch_size
                           or run.build_key != self.queue[0].build_key):
            self.flush()
        if record is not None and record.status == STATUS_OK:
            self.queue.append(run)

    def finish(self, summary: RunSummary) -> None:
        if self.queue and summary.interrupted:
            log.warning("%d measured runs were not profiled: the run was interrupted",
                        len(self.queue))
            self.queue.clear()
        try:
            self.flush()
        except (KeyboardInterrupt, Interrupted) as stop:  # the summary still gets written
            summary.interrupted = getattr(stop, "signum", signal.SIGINT)
        extra = getattr(self.writer, "finish_extra", None)
        if isinstance(extra, dict):
            extra["profiled_batches"] = self.launches
        for kind, counts in self.launches.items():
            log.info("%s: %d batches profiled%s", kind, counts["ok"] + counts["failed"],
                     f", {counts['failed']} failed" if counts["failed"] else "")

    def exit_status(self, summary: RunSummary) -> int:
        """The run's exit status, 1 where it was 0 but a profiled batch failed."""
        status = summary.exit_status
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
        op = self.spec.operators[run.op_index]
        return {"build_iterator": op.build_iterator, "input_iterator": op.input_iterator,
                "build_data_generator": op.build_data_generator,
                "input_data_generator": op.input_data_generator,
                "config": [op.configs[run.config_index]]}

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
                "config_build_id": f"{first.config_index}|{first.build_id}",
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
                "options": options_to_json(options), "workloads_dirs": self.workloads_dirs,
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
        head = list(self.settings.batch_cmd) or [sys.executable, "-m", "param_compute.run_batch"]
        return head + ["--batch-file", str(batch_file)]

    def child_env(self) -> Dict[str, str]:
        env = dict(os.environ)
        env["PYTHONUNBUFFERED"] = "1"  # the child's lines reach the log as they come
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
            f"{kind}_file": str(output), f"{kind}_cmd_str": "", "config": None,
            "start_run_id": first.id, "end_run_id": last.id, "batch": number,
            "runs": len(runs), "batch_cuda_device": self.settings.cuda_device}
        directory = Path(tempfile.mkdtemp(prefix="param_compute_batch_"))  # private: mode 0700
        started = time.monotonic()
        try:
            try:
                output.parent.mkdir(parents=True, exist_ok=True)
                batch_file = directory / "batch.json"
                batch_file.write_text(json.dumps(self.batch_document(runs, options, kind)),
                                      encoding="utf-8")
                command = profiler.command(output, self.child_command(batch_file))
                record[f"{kind}_cmd_str"] = shlex.join(command)
                record["config"] = self.param_config(runs, options)
            except (OSError, TypeError, ValueError) as exc:  # the batch can't be handed over
                status, error = None, f"could not prepare the batch: {exc}"
            else:
                log.info("%s %s|%s .. %s (%d runs): %s", prefix, first.op_name, first.id,
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
        self.writer.write_line(record)

    def _launch(self, command: List[str], prefix: str) -> Tuple[Optional[int], Optional[str]]:
        """Run the profiler, streaming its output (and the child's) to the log with a prefix;
        (exit status, error text or None)."""
        kind = Path(command[0]).name
        try:
            process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                       stderr=subprocess.STDOUT, text=True, errors="replace",
                                       bufsize=1, env=self.child_env())
        except OSError as exc:
            return None, f"could not start {command[0]}: {exc.strerror or exc}"
        try:
            for line in process.stdout:
                line = line.rstrip()
                if line:
                    log.info("%s %s", prefix, line)
            status = process.wait()
        except BaseException:  # interrupted: the profiler must not outlive us
            process.kill()
            process.wait()
            raise
        finally:
            process.stdout.close()
        return status, None if status == 0 else _exit_text(kind, status)
