"""The canary: a fixed small workload timed between configs, for contention the process can't see.

A virtual machine's host taking the core, or the CPU changing frequency, slows every op without
any descheduling the thread could notice. The canary notices: a *reading* is the median time of
``CALLS`` calls of a fixed 64x64 float32 matrix product (deterministic data, no random numbers,
a preallocated output: about half a millisecond in all). The first ``BASELINE_READINGS``
readings give its baseline (their median) and its own noise band: ``MIN_BAND``, or
``BAND_MADS`` times their median absolute deviation over the baseline where that is wider.

The rule: before a config a reading is taken when ``1 / COST_SHARE`` times the last reading's
cost has passed since it (so the readings cost ``COST_SHARE`` of the run, 1%, plus the baseline
once), and after a config that lasted that long. A run whose last reading before it, or the reading right after
it, lies outside the band gets ``canary_drift`` (the farther reading's ``(reading - baseline) /
baseline``: 0.4 is 40% slower) and is ``disturbed``. ``--no-canary`` turns it off.
"""

from __future__ import annotations

import time
from typing import Callable, List, Optional

from param_compute.measure.protocol import Protocol
from param_compute.measure.timing import CounterClock
from param_compute.results.stats import median

#: Timed calls per reading, readings for the baseline, and the noise band's rule.
CALLS = 16
BASELINE_READINGS = 5
MIN_BAND = 0.20
BAND_MADS = 5.0
#: Readings are spaced so that they take this share of the run's time (the target: under 2%
#: with the baseline's few milliseconds at the start).
COST_SHARE = 0.01
SIZE = 64


def matrix_product() -> Callable[[], object]:
    """The canary's workload: ``out = a @ b`` on fixed 64x64 float32 matrices."""
    import torch

    a = (torch.arange(SIZE * SIZE, dtype=torch.float32) / (SIZE * SIZE)).reshape(SIZE, SIZE)
    b = a.t().contiguous()
    out = torch.empty(SIZE, SIZE)
    return lambda: torch.mm(a, b, out=out)


class Canary:
    """Readings of a fixed workload and the drift of the latest ones from the baseline."""

    def __init__(self, workload: Optional[Callable[[], object]] = None,
                 clock: Callable[[], int] = time.perf_counter_ns,
                 now: Callable[[], float] = time.monotonic):
        from param_compute.measure.devices import Device
        from param_compute.measure.measurer import Measurer

        self.workload = workload or matrix_product()
        self.now = now
        # A reading is one measurement of the one Measurer: CALLS discrete calls, no warm-up.
        self.measurer = Measurer(Protocol(warmup=0, iteration=CALLS),
                                 Device("canary", CounterClock(clock)), num_threads=None)
        self.baseline: Optional[float] = None
        self.band = MIN_BAND
        self.interval = 0.0  # seconds between readings (from a reading's cost)
        self.last_at = -float("inf")
        self.latest: Optional[float] = None  # the drift of the last reading, if outside
        self.readings: List[float] = []

    def reading(self) -> float:
        """The median time (ms) of ``CALLS`` calls of the workload."""
        return self.measurer.measure(self.workload, name="canary").stats()["median"]

    def start(self) -> None:
        """The baseline and noise band, from ``BASELINE_READINGS`` readings after a warm-up."""
        for _ in range(3):
            self.workload()
        began = self.now()
        values = [self.reading() for _ in range(BASELINE_READINGS)]
        cost = (self.now() - began) / BASELINE_READINGS
        self.baseline = median(values)
        spread = median([abs(v - self.baseline) for v in values])
        self.band = max(MIN_BAND, BAND_MADS * spread / self.baseline) if self.baseline > 0 \
            else MIN_BAND
        self.interval = cost / COST_SHARE
        self.last_at = self.now()

    def check(self) -> Optional[float]:
        """Take a reading; its drift from the baseline when outside the band, else None."""
        began = self.now()
        value = self.reading()
        self.readings.append(value)
        self.last_at = self.now()
        self.interval = (self.last_at - began) / COST_SHARE
        drift = (value - self.baseline) / self.baseline if self.baseline else 0.0
        self.latest = round(drift, 4) if abs(drift) > self.band else None
        return self.latest

    def before(self) -> float:
        """Before a config: a reading if one is due; returns the config's start time."""
        if self.baseline is None:
            self.start()
        elif self.now() - self.last_at >= self.interval:
            self.check()
        return self.now()

    def after(self, started: float) -> Optional[float]:
        """After a config started at ``started``: a reading if the config lasted a reading's
        interval; the run's drift (the farther of the readings around it outside the band)."""
        before = self.latest
        if self.now() - started >= self.interval:
            self.check()
        found = [d for d in (before, self.latest) if d is not None]
        return max(found, key=abs) if found else None
