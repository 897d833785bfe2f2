"""The ``--timer`` choices: which clock a pass's times come from, and where each one applies.

(With them, the checks of the other measuring bounds: ``--max-noise``, ``--max-time``,
``--keep-samples``.)

``TIMERS`` is the table: a name, its help text and what refuses it for a run (a device it cannot
time, a thread count it would misread). Adding a clock is adding a row. Torch-free.

* ``wall`` (default): the device's own clock: the host's ``perf_counter_ns`` on CPU, CUDA events
  on a GPU.
* ``cpu``: the calling thread's CPU time (``time.thread_time_ns``), read by the same loop beside
  the host clock: time the thread spent descheduled (another process on its core, a host's
  steal) is not counted. Only the calling thread's time is seen, so it needs one intra-op thread,
  and it cannot time work queued on a GPU.
* ``kernel`` (CUDA): the CUDA events as ``wall``, and beside them the summed device time of the
  kernels each call launched, through the PyTorch profiler (``measure.kernel_time``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple


@dataclass(frozen=True)
class Timer:
    """One ``--timer`` choice: ``refusal(device, num_threads)`` says why it cannot time such a
    run (None: it can)."""

    name: str
    help: str
    refusal: Callable[[str, int], Optional[str]]


def _any_run(device: str, num_threads: int) -> Optional[str]:
    return None


def _one_host_thread(device: str, num_threads: int) -> Optional[str]:
    if device.startswith("cuda"):
        return ("--timer cpu times the calling thread's CPU time, which cannot see work queued "
                "on a GPU: use --timer wall (CUDA events) with -d cuda")
    if num_threads != 1:
        return (f"--timer cpu counts the calling thread's CPU time only, not the other "
                f"{num_threads - 1} intra-op thread(s): use --num-threads 1")
    return None


def _cuda(device: str, num_threads: int) -> Optional[str]:
    if not device.startswith("cuda"):
        return "--timer kernel times CUDA kernels: use -d cuda"
    return None


TIMERS: Dict[str, Timer] = {timer.name: timer for timer in (
    Timer("wall", "the device's clock: perf_counter on CPU, CUDA events on a GPU", _any_run),
    Timer("cpu", "the calling thread's CPU time (CPU, --num-threads 1): time spent "
                 "descheduled is not counted", _one_host_thread),
    Timer("kernel", "CUDA: the events, and the summed kernel time per call beside them "
                    "(torch.profiler)", _cuda),
)}


def timer_refusal(timer: str, device: str, num_threads: int,
                  discard_disturbed: bool = False) -> Optional[str]:
    """Why ``--timer TIMER`` (or ``--discard-disturbed``, which judges samples by the thread's
    CPU time) cannot time a run on ``device`` with ``num_threads`` (None: it can)."""
    if timer not in TIMERS:
        return f"--timer must be one of {', '.join(TIMERS)}, got {timer!r}"
    if discard_disturbed and (device.startswith("cuda") or num_threads != 1):
        return ("--discard-disturbed judges each sample by the calling thread's CPU time: it "
                "needs a CPU run with --num-threads 1")
    return TIMERS[timer].refusal(device, num_threads)


#: The longest ``--max-time``/``--min-time``/``--warmup-time`` a run takes (a week): beyond,
#: a time is a typo (and 1e308 s overflows every sum made of it).
MAX_SECONDS = 7 * 24 * 3600.0


def measuring_refusal(max_noise: Optional[float], max_time: float, min_time: float,
                      iteration: int, keep_samples: int) -> Optional[str]:
    """What is wrong with ``--max-noise``/``--max-time``/``--keep-samples`` (None: nothing);
    ``max_noise`` None: no noise rule (0 is no percentage: refused, not taken as off)."""
    if max_noise is not None and (not (math.isfinite(max_noise) and max_noise > 0)
                                  or iteration == 0):
        return (f"--max-noise must be a percentage > 0 with --iteration >= 1, got {max_noise}"
                + (" (leave it out for no noise rule)" if max_noise == 0 else ""))
    if not (math.isfinite(max_time) and 0 <= max_time <= MAX_SECONDS):  # refused where unused
        return (f"--max-time must be >= 0 seconds and finite, got {max_time}"
                if not (math.isfinite(max_time) and max_time >= 0) else
                f"--max-time {max_time:g} s is more than a week ({MAX_SECONDS:g} s): a typo?")
    if max_noise is not None and not (min_time <= max_time < math.inf):
        return f"--max-time ({max_time}) must be finite and >= --min-time ({min_time})"
    if keep_samples < 1:
        return f"--keep-samples must be >= 1, got {keep_samples}"
    return None


def reads_thread_cpu(clock: Any, num_threads: int) -> bool:
    """Whether the timing loop reads thread CPU time beside ``clock``: the host's clock, where
    one thread does the work (with more, the caller's CPU time says nothing of the others)."""
    return getattr(clock, "name", None) == "host" and num_threads == 1


def pick_times(timer: str, clock_ms: List[float],
               cpu_ms: List[float]) -> Tuple[List[float], Optional[str], List[float]]:
    """(the pass's times, the metric name of the other clock's times, those times): with
    ``--timer cpu`` the thread CPU times are the pass's and the wall times go beside them."""
    if timer == "cpu":
        return cpu_ms, "measure.wall_time", clock_ms
    return clock_ms, ("measure.cpu_time" if cpu_ms else None), cpu_ms
