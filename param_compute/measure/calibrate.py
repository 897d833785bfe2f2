"""``python -m param_compute.calibrate``: measure this machine's peaks and cache them.

Peak FLOP/s per floating dtype is the best rate of square GEMMs (``torch.mm`` into a preallocated
output), sizes doubling until a call lasts long enough or two sizes in a row gain less than 2%;
peak bandwidth is the best of a large copy (2 x N elements moved) and a large add (3 x N), counted
the way runs count bytes (inputs plus outputs). Both are timed with the run's own clock and loop
(the one ``Measurer``, continuous mode, CUDA events on a GPU), one torch thread unless asked
otherwise.
The peaks go to the per-machine cache (``measure.peaks``), keyed by device name, driver and
torch versions and thread count; runs with the same setup then report utilization.

Peaks measured on a busy machine are wrong in the direction that hurts: too low, so every run
later reads above 100% of them. On the CPU each timed block's process CPU time is set against
its wall time times the thread count: a block below ``BUSY_ENOUGH`` of that ran while other
work had the cores. The whole measurement is then repeated (up to ``ATTEMPTS`` times, keeping
the best rate of each quantity); peaks still measured while disturbed are not cached (a
warning says why; ``--force`` caches them anyway).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from param_compute.errors import EXIT_INVALID, OptionsError
from param_compute.measure.peaks import (FLOATING, Peaks, cache_path, cached_peaks,
                                         canonical_dtype, cpu_name, machine_key, read_cache,
                                         store)

log = logging.getLogger("param_compute")

#: Seconds of timed calls per GEMM size and per bandwidth kernel.
SECONDS = 0.4
CPU_GEMM_SIZES = (256, 512, 1024, 2048, 4096)
CUDA_GEMM_SIZES = (1024, 2048, 4096, 8192, 16384)
#: Elements per tensor of the bandwidth kernels: far beyond any cache.
CPU_STREAM_ELEMENTS = 1 << 25
CUDA_STREAM_ELEMENTS = 1 << 28
#: A CPU block whose process CPU time is below this fraction of wall time x threads was
#: disturbed (other processes had the cores).
BUSY_ENOUGH = 0.85
#: Measurements of the whole set of peaks before giving up on an undisturbed one.
ATTEMPTS = 3
#: The most calls one timed loop makes.
MAX_CALLS = 10_000


class Busy:
    """The least busy fraction seen over the timed blocks of one calibration (CPU only):
    process CPU seconds over wall seconds x threads; 1.0 when nothing was disturbed."""

    def __init__(self, device: str, threads: int) -> None:
        self.cpu = not device.startswith("cuda")
        self.threads = threads
        self.least = 1.0

    def timed(self, fn):
        """``fn()``'s value, noting how busy this process kept its threads meanwhile."""
        if not self.cpu:
            return fn()
        wall, cpu = time.perf_counter(), time.process_time()
        value = fn()
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        if wall > 0.005:  # shorter blocks are all clock granularity
            self.least = min(self.least, cpu / (wall * self.threads))
        return value

    @property
    def disturbed(self) -> bool:
        return self.least < BUSY_ENOUGH


def device_identity(device: str) -> Dict[str, str]:
    import torch

    if device.startswith("cuda"):
        index = torch.device(device).index or 0
        driver = f"cuda {torch.version.cuda}"
        try:
            import pynvml

            pynvml.nvmlInit()
            driver += f" driver {pynvml.nvmlSystemGetDriverVersion()}"
        except Exception:  # NVML is optional: the CUDA version still tells setups apart
            pass
        return {"device_name": torch.cuda.get_device_name(index), "driver": driver}
    return {"device_name": cpu_name(), "driver": "cpu"}


def key_for(device: str, threads: int) -> str:
    import torch

    ident = device_identity(device)
    return machine_key(ident["device_name"], ident["driver"], torch.__version__, threads)


def peaks_for_run(device: str, threads: int, peaks_file: Optional[str]) -> Optional[Peaks]:
    """The peaks a run uses: ``--peaks FILE``, else the cache's entry for this setup."""
    if peaks_file:
        return Peaks.from_file(peaks_file)
    key = key_for(device, threads)
    peaks = cached_peaks(key)
    if peaks is None:
        log.debug("no calibrated peaks for %s (python -m param_compute.calibrate): no "
                  "utilization", key)
    return peaks


def main_dtype(value: Any) -> Optional[str]:
    """The floating dtype of the largest floating tensor in an argument tree."""
    import torch

    best, size = None, -1
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, torch.Tensor):
            if item.is_floating_point() and item.numel() > size:
                best, size = str(item.dtype).removeprefix("torch."), item.numel()
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return best


def _rate(fn, work: float, device, seconds: float, busy: Optional[Busy] = None) -> float:
    """Work per second of ``fn`` at its median block time: the one ``Measurer``, continuous
    mode, two warm-up calls, then one back-to-back loop of ``seconds`` stamped in blocks (at
    most ``MAX_CALLS`` calls)."""
    from param_compute.measure.measurer import Measurer
    from param_compute.measure.protocol import Protocol
    from param_compute.measure.timing import ExecMode

    protocol = Protocol(warmup=2, iteration=1, min_time=seconds, max_iteration=MAX_CALLS,
                        exec_mode=ExecMode.CONTINUOUS)
    measure = lambda: Measurer(protocol, device, num_threads=None).measure(  # noqa: E731
        fn, name="calibrate")
    result = busy.timed(measure) if busy is not None else measure()
    return work / (result.stats()["median"] / 1e3)


def measure_gemm(device: str, dtype: str, opened, seconds: float = SECONDS,
                 busy: Optional[Busy] = None) -> Dict[str, Any]:
    """Best GEMM FLOP/s of ``dtype`` over doubling sizes, with the rate at each size."""
    import torch

    sizes = CUDA_GEMM_SIZES if device.startswith("cuda") else CPU_GEMM_SIZES
    torch_dtype = getattr(torch, dtype)
    by_size: Dict[str, float] = {}
    best, flat = 0.0, 0
    for n in sizes:
        a = torch.rand(n, n, device=device).to(torch_dtype)  # as the default generator
        b = torch.rand(n, n, device=device).to(torch_dtype)
        out = torch.empty(n, n, device=device, dtype=torch_dtype)
        rate = _rate(lambda: torch.mm(a, b, out=out), 2.0 * n ** 3, opened, seconds, busy)
        del a, b, out
        by_size[str(n)] = rate
        call_s = 2.0 * n ** 3 / rate
        flat = flat + 1 if rate < best * 1.02 else 0
        best = max(best, rate)
        if flat >= 2 or call_s > seconds / 3:  # two sizes without gain, or the next is slow
            break
    return {"flops_per_s": best, "by_size": by_size}


def measure_bandwidth(device: str, opened, seconds: float = SECONDS,
                      elements: Optional[int] = None,
                      busy: Optional[Busy] = None) -> Dict[str, Any]:
    """Best of a large copy and a large add, in bytes per second."""
    import torch

    n = elements or (CUDA_STREAM_ELEMENTS if device.startswith("cuda") else CPU_STREAM_ELEMENTS)
    a = torch.rand(n, device=device)
    b = torch.rand(n, device=device)
    c = torch.empty(n, device=device)
    copy = _rate(lambda: c.copy_(a), 2.0 * 4 * n, opened, seconds, busy)
    add = _rate(lambda: torch.add(a, b, out=c), 3.0 * 4 * n, opened, seconds, busy)
    return {"bytes_per_s": max(copy, add), "copy_bytes_per_s": copy, "add_bytes_per_s": add,
            "elements": n}


def _measure_all(device: str, dtypes: Sequence[str], opened, seconds: float,
                 stream_elements: Optional[int], busy: Busy) -> Dict[str, Any]:
    """One measurement of every peak: ``{"flops_per_s": {dtype: F}, "bytes_per_s": B,
    "detail": ...}``."""
    flops, detail = {}, {}
    for dtype in dtypes:
        gemm = measure_gemm(device, dtype, opened, seconds, busy)
        flops[dtype] = gemm["flops_per_s"]
        detail[f"gemm_{dtype}"] = gemm["by_size"]
    stream = measure_bandwidth(device, opened, seconds, stream_elements, busy)
    detail["stream"] = {k: v for k, v in stream.items() if k != "bytes_per_s"}
    return {"flops_per_s": flops, "bytes_per_s": stream["bytes_per_s"], "detail": detail}


def _best(a: Dict[str, Any], b: Dict[str, Any]) -> Dict[str, Any]:
    """Each peak's best of two measurements (a disturbance only ever lowers a rate)."""
    flops = {d: max(a["flops_per_s"].get(d, 0.0), v) for d, v in b["flops_per_s"].items()}
    better = b if b["bytes_per_s"] > a["bytes_per_s"] else a
    return {"flops_per_s": flops, "bytes_per_s": better["bytes_per_s"],
            "detail": better["detail"]}


def calibrate(device: str = "cpu", threads: int = 1, dtypes: Sequence[str] = ("float32",),
              seconds: float = SECONDS, stream_elements: Optional[int] = None,
              force: bool = False) -> Dict[str, Any]:
    """Measure the peaks of this setup; the entry, stored in the cache unless it was measured
    while the machine was busy (``entry["disturbed"]``; ``force`` stores it all the same)."""
    import torch

    from param_compute.measure.devices import open_device

    previous_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        opened = open_device(device, flush_l2=False)
        best, busy = None, None
        for attempt in range(1, ATTEMPTS + 1):
            busy = Busy(device, threads)
            measured = _measure_all(device, dtypes, opened, seconds, stream_elements, busy)
            best = measured if best is None else _best(best, measured)
            if not busy.disturbed:
                break
            log.warning("calibration attempt %d of %d ran on a busy machine (this process had "
                        "%.0f%% of its cores in its least busy block): measuring again",
                        attempt, ATTEMPTS, 100 * busy.least)
    finally:
        torch.set_num_threads(previous_threads)
    key = key_for(device, threads)
    entry = {"flops_per_s": best["flops_per_s"], "bytes_per_s": best["bytes_per_s"],
             "key": key, **device_identity(device), "torch": torch.__version__,
             "threads": threads, "measured": datetime.now().isoformat(timespec="seconds"),
             "busy_fraction": round(busy.least, 3), "detail": best["detail"]}
    if busy.disturbed and not force:
        entry["disturbed"] = True
        return entry
    entry["path"] = str(store(key, {k: v for k, v in entry.items()}))
    return entry


def spec_dtypes(path: Path) -> List[str]:
    """The floating dtypes a spec's tensors use (``float32`` when it names none)."""
    from param_compute.files import FileRefused, read_bounded
    from param_compute.spec.loader import MAX_SPEC_BYTES

    try:
        raw = json.loads(read_bounded(path, MAX_SPEC_BYTES))
    except FileRefused as refused:
        raise OptionsError(f"-c {path}: {refused.reason}") from None
    except (OSError, ValueError) as exc:
        raise OptionsError(f"-c {path}: cannot read it as JSON: {exc}") from None
    return spec_dtypes_from(raw)


def spec_dtypes_from(raw: Any) -> List[str]:
    """The floating dtypes of the tensor data specs anywhere in a parsed spec."""
    found, stack = set(), [raw]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if item.get("type") == "tensor":
                found.add(canonical_dtype(str(item.get("dtype", "float32"))))
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    found.discard(None)
    return sorted(found) or ["float32"]


def main(argv: Optional[List[str]] = None,
         prog: str = "python -m param_compute.calibrate") -> int:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Measure peak FLOP/s (large GEMMs) per dtype and peak memory bandwidth "
                    "(large copy/add) of this device and thread count; cache them for runs.")
    parser.add_argument("-d", "--device", default="cpu", help="cpu, cuda or cuda:N")
    parser.add_argument("--num-threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--dtype", action="append", choices=FLOATING,
                        help="a floating dtype to calibrate (repeatable; default float32)")
    parser.add_argument("-c", "--config", type=Path,
                        help="calibrate the floating dtypes this spec's tensors use")
    parser.add_argument("--seconds", type=float, default=SECONDS,
                        help=f"timed seconds per GEMM size and kernel (default {SECONDS})")
    parser.add_argument("--show", action="store_true",
                        help="print the cached peaks of this setup; measure nothing")
    parser.add_argument("--force", action="store_true",
                        help="cache the peaks even when they were measured on a busy machine")
    args = parser.parse_args(argv)
    try:
        from param_compute.measure.devices import check_device

        if args.num_threads < 1 or args.seconds <= 0:
            raise OptionsError("--num-threads and --seconds must be positive")
        check_device(args.device)
        if args.show:
            peaks = cached_peaks(key_for(args.device, args.num_threads))
            if peaks is None:
                print(f"no peaks cached for this setup in {cache_path()}")
                return 1
            _print(peaks.flops_per_s, peaks.bytes_per_s, peaks.source)
            return 0
        read_cache()  # an unusable cache is said before measuring, not after
        dtypes = list(args.dtype or []) + (spec_dtypes(args.config) if args.config else [])
        entry = calibrate(args.device, args.num_threads, sorted(set(dtypes or ["float32"])),
                          args.seconds, force=args.force)
    except OptionsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INVALID
    if entry.get("disturbed"):
        _print(entry["flops_per_s"], entry["bytes_per_s"], None)
        print(f"error: not cached: the machine was busy in all {ATTEMPTS} attempts (this process "
              f"had {entry['busy_fraction']:.0%} of its cores at worst), so these peaks are too "
              "low and would put runs above 100% of them; rerun on an idle machine, or pass "
              "--force to cache them anyway", file=sys.stderr)
        return 1
    _print(entry["flops_per_s"], entry["bytes_per_s"], f"{entry['path']} [{entry['key']}]")
    return 0


def _print(flops: Dict[str, float], bandwidth: Optional[float], where: Optional[str]) -> None:
    for dtype, value in sorted(flops.items()):
        print(f"peak {dtype:<9} {value / 1e12:10.4f} TFLOP/s")
    if bandwidth:
        print(f"peak bandwidth {bandwidth / 1e9:10.2f} GB/s")
    if where is not None:
        print(f"cached in {where}")
