"""GPU clocks and throttling through NVML (``pynvml`` of the optional ``nvidia-ml-py`` package).

A GPU that throttles (power cap, thermal slowdown) runs its kernels slower for a while: samples
timed then are not the op's speed. :class:`GpuClocks` reads the SM clock and the clock-event
(throttle) reasons of one GPU; :class:`ThrottleWatch` wraps the timing loop's clock and reads
them in the discrete barrier, *before* its synchronize, outside the timed region (the read
happens while the previous iteration's kernels may still run), so each sample ``i`` has the
reading before it and the one after it: it counts as throttled when either shows a throttling
reason (``THROTTLING``; idle and the applications-clock setting are not throttling). In the
continuous modes there is no barrier: the worst reading as a timed loop started or at the end
marks all the pass's samples. :func:`clocks_header` says, for the results header, the clocks at start and whether
they were locked (``nvidia-smi -lgc``/``-ac``): NVML has no getter for a locked range, so
"locked" means the applications clocks differ from their defaults or NVML reports the
applications-clock setting as a clock-event reason; a run whose clocks are not locked is
warned about.

Everything NVML is behind ``nvml``, a module-like object (``pynvml`` itself, or a test's fake).
"""

from __future__ import annotations

import logging
from typing import Any, Dict, List, NamedTuple, Optional, Tuple

log = logging.getLogger("param_compute")

#: NVML clock-event (throttle) reason bits that slow the kernels down.
THROTTLING = {0x4: "sw_power_cap", 0x8: "hw_slowdown", 0x20: "sw_thermal_slowdown",
              0x40: "hw_thermal_slowdown", 0x80: "hw_power_brake_slowdown"}
THROTTLING_MASK = sum(THROTTLING)
APPLICATIONS_CLOCKS_SETTING = 0x2


def reason_names(mask: int) -> List[str]:
    return [name for bit, name in THROTTLING.items() if mask & bit]


def load_nvml() -> Tuple[Optional[Any], str]:
    """(pynvml, "") initialized, or (None, why not)."""
    try:
        import pynvml  # the nvidia-ml-py package (optional: pip install param_compute[gpu])
    except ImportError:
        return None, "pynvml not installed (pip install nvidia-ml-py)"
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # NVMLError: no driver, no permission
        return None, f"NVML failed to start: {exc}"
    return pynvml, ""


class Reading(NamedTuple):
    sm_mhz: int
    reasons: int

    @property
    def throttled(self) -> bool:
        return bool(self.reasons & THROTTLING_MASK)


def _cuda_handle(nvml: Any, cuda_index: int) -> Any:
    """The NVML handle of CUDA device ``cuda_index``: by PCI bus id where torch tells it
    (``CUDA_VISIBLE_DEVICES`` renumbers CUDA devices, not NVML's), else by index."""
    try:
        import torch

        bus = torch.cuda.get_device_properties(cuda_index).pci_bus_id
        return nvml.nvmlDeviceGetHandleByPciBusId(bus)
    except Exception:
        return nvml.nvmlDeviceGetHandleByIndex(cuda_index)


class GpuClocks:
    """SM clock and clock-event reasons of one GPU, read through ``nvml``."""

    def __init__(self, nvml: Any, handle: Any):
        self.nvml = nvml
        self.handle = handle
        self._reasons = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) \
            or nvml.nvmlDeviceGetCurrentClocksThrottleReasons

    @classmethod
    def open(cls, cuda_index: int, nvml: Any = None) -> Tuple[Optional["GpuClocks"], str]:
        """(clocks, "") for a CUDA device, or (None, why NVML cannot tell)."""
        why = ""
        if nvml is None:
            nvml, why = load_nvml()
        if nvml is None:
            return None, why
        try:
            return cls(nvml, _cuda_handle(nvml, cuda_index)), ""
        except Exception as exc:
            return None, f"NVML has no handle for cuda:{cuda_index}: {exc}"

    def read(self) -> Reading:
        return Reading(int(self.nvml.nvmlDeviceGetClockInfo(self.handle, self.nvml.NVML_CLOCK_SM)),
                       int(self._reasons(self.handle)))

    def header(self) -> Dict[str, Any]:
        """The clocks now, their maxima and application settings, and whether they are locked."""
        nvml, handle, sm = self.nvml, self.handle, self.nvml.NVML_CLOCK_SM
        reading = self.read()
        out: Dict[str, Any] = {"source": "nvml", "sm_clock_mhz": reading.sm_mhz,
                               "max_sm_clock_mhz": int(nvml.nvmlDeviceGetMaxClockInfo(handle, sm)),
                               "mem_clock_mhz": int(nvml.nvmlDeviceGetClockInfo(
                                   handle, nvml.NVML_CLOCK_MEM)),
                               "throttle_reasons": reason_names(reading.reasons)}
        try:
            out["app_sm_clock_mhz"] = int(nvml.nvmlDeviceGetApplicationsClock(handle, sm))
            out["default_app_sm_clock_mhz"] = int(
                nvml.nvmlDeviceGetDefaultApplicationsClock(handle, sm))
        except Exception:  # not supported on this GPU
            pass
        set_apps = out.get("app_sm_clock_mhz", 0) != out.get("default_app_sm_clock_mhz", 0)
        out["locked"] = bool(set_apps or reading.reasons & APPLICATIONS_CLOCKS_SETTING)
        return out


def clocks_header(cuda_index: int, nvml: Any = None) -> Dict[str, Any]:
    """``sys_info.gpu_clocks``: :meth:`GpuClocks.header`, or ``{"source": null, "why": ...}``;
    a warning when the clocks are not locked (or NVML cannot tell)."""
    clocks, why = GpuClocks.open(cuda_index, nvml)
    if clocks is None:
        log.warning("GPU clocks unknown (%s): times may vary with boost clocks", why)
        return {"source": None, "why": why}
    try:
        header = clocks.header()
    except Exception as exc:
        log.warning("GPU clocks unknown (NVML: %s)", exc)
        return {"source": None, "why": f"NVML: {exc}"}
    if not header["locked"]:
        log.warning("GPU clocks are not locked (SM %d of %d MHz): boost and throttling move "
                    "the times; lock them (nvidia-smi -lgc) for stable numbers",
                    header["sm_clock_mhz"], header["max_sm_clock_mhz"])
    return header


class ThrottleWatch:
    """A timing-loop clock that also reads ``clocks`` in each discrete barrier and as each
    timed loop starts (``reserve``), outside the timed region (see the module's doc); every
    other member is the wrapped clock's."""

    def __init__(self, clock: Any, clocks: GpuClocks):
        self._clock = clock
        self.clocks = clocks
        self.in_barrier: List[Reading] = []  # one per discrete iteration
        self.at_loops: List[Reading] = []  # one per timed loop
        self.barrier = self._barrier if clock.barrier is not None else None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._clock, name)

    def _barrier(self) -> None:
        self.in_barrier.append(self.clocks.read())  # before the synchronize: not timed
        self._clock.barrier()

    def reserve(self, count: int) -> None:
        self.at_loops.append(self.clocks.read())
        reserve = getattr(self._clock, "reserve", None)
        if reserve is not None:
            reserve(count)

    def per_sample(self, count: int) -> List[Reading]:
        """The pass's ``count`` measured samples ended now: the worse reading around each one
        (discrete: the barrier readings before it and after it; otherwise the readings as its
        loops started and now). The readings so far are then forgotten."""
        end = self.clocks.read()
        if len(self.in_barrier) >= count:
            around = self.in_barrier[len(self.in_barrier) - count:] + [end]
        else:
            worst = max(self.at_loops + [end], key=_badness)
            around = [worst] * (count + 1)
        self.in_barrier, self.at_loops = [], []
        return [max(around[i], around[i + 1], key=_badness) for i in range(count)]


def _badness(reading: Reading) -> Tuple[bool, int]:
    return reading.throttled, -reading.sm_mhz


def watch_clocks(device: Any) -> Optional[ThrottleWatch]:
    """Wrap a CUDA device's clock in a :class:`ThrottleWatch` (None off CUDA or without NVML)."""
    if not str(device.name).startswith("cuda"):
        return None
    index = int(str(device.name).partition(":")[2] or 0)
    clocks, why = GpuClocks.open(index)
    if clocks is None:
        log.info("no per-sample GPU clocks: %s", why)
        return None
    device.clock = ThrottleWatch(device.clock, clocks)
    return device.clock


def mark_throttled(result: Any, readings: List[Reading], discard: bool) -> int:
    """Put the readings of a measured pass into ``result.extra`` (``measure.sm_clock`` MHz and
    ``measure.throttled`` 0/1 per sample); with ``discard``, drop the throttled samples (and
    their entries in per-sample lists) unless none would be left, recording how many in
    ``measure.discarded_throttled``. Returns the number of throttled samples."""
    flags = [int(r.throttled) for r in readings]
    throttled = sum(flags)
    keep = [i for i, flag in enumerate(flags) if not flag]
    result.extra["measure.sm_clock"] = [r.sm_mhz for r in readings]
    result.extra["measure.throttled"] = flags
    if throttled:
        names = sorted({n for r in readings if r.throttled for n in reason_names(r.reasons)})
        log.warning("%d of %d samples taken while the GPU throttled (%s)%s", throttled,
                    len(flags), ", ".join(names),
                    ": discarded" if discard and keep else "")
    if discard and throttled and keep:
        count = len(flags)
        result.measure_ms = [result.measure_ms[i] for i in keep]
        for key, values in result.extra.items():
            if key.startswith("measure.") and isinstance(values, list) and len(values) == count:
                result.extra[key] = [values[i] for i in keep]
        result.extra["measure.discarded_throttled"] = [throttled]
    return throttled
