"""``--ncu`` / ``--nsys`` settings: which profiler runs, with which flags, in which batches.

Finds the Nsight Compute / Systems binaries, declares PARAM's Nsight command-line flags, checks
them into :class:`BatchSettings` before anything runs, and derives the options of the profiled
child. The sink that queues the measured runs and launches the batches is
:mod:`param_compute.profiling.batches`; the child is :mod:`param_compute.profiling.batch_child`.
Torch-free.
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import logging
import os
import re
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

from param_compute.errors import OptionsError
from param_compute.files import read_bounded
from param_compute.runtime.options import RunOptions

log = logging.getLogger("param_compute")

BATCH_FORMAT = "param_compute.batch/1"
PROFILERS = ("ncu", "nsys")
#: The largest ``--ncu-args-file`` / ``--nsys-args-file`` read (a few shell words).
MAX_ARGS_FILE_BYTES = 1 << 20

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
        text = read_bounded(path, MAX_ARGS_FILE_BYTES).decode("utf-8")
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
            from param_compute.measure.ranges import NCU_ITERATION_FILTER  # imports nvtx

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
                            "this python -m param_compute.profiling.batch_child)")


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
    counts, NVTX per iteration, and nothing that adds work or output (no adaptive iterations
    or warm-up time, verification, FLOP counting, traces, worker process)."""
    device = options.device
    if cuda_device is not None and device.startswith("cuda"):
        device = "cuda"  # the child sees only the devices in its CUDA_VISIBLE_DEVICES
    return dataclasses.replace(
        options, device=device, warmup=profiler.warmup, iteration=profiler.iteration,
        min_time=0.0, max_iteration=profiler.iteration, warmup_time=0.0, verify=None,
        resume_id=None, stop_id=None, only=(), keywords=(), input_ids=(), repetitions=1,
        dry_run=False, throughput=False, profile=False, execution_trace=False, fail_fast=False,
        isolate=False, timeout=None, nvtx_iterations=True)
