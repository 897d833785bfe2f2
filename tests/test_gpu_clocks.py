"""CUDA clocks, throttling and kernel time, driven on the CPU through fake NVML and profiler
objects (``measure.gpu_clocks``, ``measure.kernel_time``, ``measure.device_samples``)."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest

import param_compute
import param_compute.measure.gpu_clocks as gpu_clocks
from conftest import EXAMPLES, run_cli, simple_op, tensor
from param_compute.results.records import PassResult
from param_compute.measure.device_samples import finish_measure
from param_compute.measure.gpu_clocks import GpuClocks, Reading, ThrottleWatch, clocks_header
from param_compute.measure.kernel_time import (RANGE_PREFIX, add_kernel_times, kernel_sums,
                                               time_kernels)
from test_measurement import FakeCudaClock, fake_cuda  # noqa: F401  (fake_cuda: a fixture)

SW_THERMAL, IDLE, APP_CLOCKS = 0x20, 0x1, 0x2


class FakeNvml:
    """pynvml's calls that param_compute makes; read ``n`` of the SM clock gives
    ``clocks(n)`` MHz and the reasons ``reasons(n)``."""

    NVML_CLOCK_SM, NVML_CLOCK_MEM = 1, 2

    def __init__(self, reasons=lambda n: 0, clocks=lambda n: 1980, app=1980, default_app=1980):
        self.reads = 0
        self._reasons, self._clocks = reasons, clocks
        self.app, self.default_app = app, default_app

    def nvmlDeviceGetHandleByPciBusId(self, bus):
        raise RuntimeError("no such bus")  # the index is used then

    def nvmlDeviceGetHandleByIndex(self, index):
        return ("gpu", index)

    def nvmlDeviceGetClockInfo(self, handle, kind):
        if kind == self.NVML_CLOCK_MEM:
            return 2619
        self.reads += 1
        return self._clocks(self.reads - 1)

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle):
        return self._reasons(self.reads - 1)

    def nvmlDeviceGetMaxClockInfo(self, handle, kind):
        return 1980

    def nvmlDeviceGetApplicationsClock(self, handle, kind):
        return self.app

    def nvmlDeviceGetDefaultApplicationsClock(self, handle, kind):
        return self.default_app


def test_header_says_whether_clocks_are_locked_and_warns_when_not(caplog):
    with caplog.at_level(logging.WARNING, logger="param_compute"):
        header = clocks_header(0, FakeNvml(clocks=lambda n: 1755, reasons=lambda n: IDLE))
    assert header == {"source": "nvml", "sm_clock_mhz": 1755, "max_sm_clock_mhz": 1980,
                      "mem_clock_mhz": 2619, "throttle_reasons": [], "app_sm_clock_mhz": 1980,
                      "default_app_sm_clock_mhz": 1980, "locked": False}
    assert "GPU clocks are not locked (SM 1755 of 1980 MHz)" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="param_compute"):
        assert clocks_header(0, FakeNvml(app=1410))["locked"] is True  # nvidia-smi -ac
        assert clocks_header(0, FakeNvml(reasons=lambda n: APP_CLOCKS))["locked"] is True
    assert "not locked" not in caplog.text


def test_header_without_nvml_says_why(monkeypatch, caplog):
    monkeypatch.setattr(gpu_clocks, "load_nvml", lambda: (None, "pynvml not installed"))
    with caplog.at_level(logging.WARNING, logger="param_compute"):
        assert clocks_header(0) == {"source": None, "why": "pynvml not installed"}
    assert "GPU clocks unknown (pynvml not installed)" in caplog.text


def test_throttle_watch_reads_outside_the_timed_region_and_marks_samples_around_a_reading():
    clock = FakeCudaClock()
    # reads: 0 reserve, 1-4 barriers before samples 0-3; read 3 shows thermal slowdown
    watch = ThrottleWatch(clock, GpuClocks(FakeNvml(reasons=lambda n: SW_THERMAL if n == 3
                                                    else 0, clocks=lambda n: 1980 - n), None))
    from param_compute.measure.timing import ExecMode, time_calls

    times = time_calls(lambda: None, 4, watch, ExecMode.DISCRETE)
    assert times == [0.5] * 4 and clock.barriers == 4  # the wrapped clock still times
    readings = watch.per_sample(4)
    # read 3 came before sample 2 (after sample 1): both are marked
    assert [r.throttled for r in readings] == [False, True, True, False]
    assert [r.sm_mhz for r in readings] == [1978, 1977, 1977, 1975]  # the lower clock of two
    assert watch.in_barrier == [] and watch.at_loops == []


def test_continuous_modes_mark_every_sample_by_the_loop_readings():
    watch = ThrottleWatch(FakeCudaClock(), GpuClocks(
        FakeNvml(reasons=lambda n: SW_THERMAL if n == 0 else 0), None))
    from param_compute.measure.timing import ExecMode, time_calls

    time_calls(lambda: None, 20, watch, ExecMode.CONTINUOUS)  # 10 blocks, no barrier
    assert [r.throttled for r in watch.per_sample(10)] == [True] * 10


def _nvml_run(monkeypatch, nvml, **options):
    monkeypatch.setattr(gpu_clocks, "load_nvml", lambda: (nvml, ""))
    spec = simple_op("torch.add", tensor(4), tensor(4))
    [record] = param_compute.run(spec, warmup=2, iteration=4, **options).records
    return record["metric"]["forward"]


def test_a_cuda_run_records_clock_and_throttling_per_sample(fake_cuda, monkeypatch):
    # reads: 0 warm-up loop, 1-2 its barriers, 3 measure loop, 4-7 barriers, 8 the end
    forward = _nvml_run(monkeypatch, FakeNvml(reasons=lambda n: SW_THERMAL if n == 6 else 0,
                                              clocks=lambda n: 1500 if n == 6 else 1980))
    assert forward["measure.throttled"] == [0, 1, 1, 0]
    assert forward["measure.sm_clock"] == [1980, 1500, 1500, 1980]
    assert len(forward["measure.time"]) == 4 and "measure.discarded_throttled" not in forward


def test_discard_throttled_drops_those_samples_and_says_how_many(fake_cuda, monkeypatch):
    forward = _nvml_run(monkeypatch, FakeNvml(reasons=lambda n: SW_THERMAL if n == 6 else 0),
                        discard_throttled=True)
    assert forward["measure.discarded_throttled"] == [2]
    assert len(forward["measure.time"]) == 2 and len(forward["measure.host_time"]) == 2
    assert forward["measure.throttled"] == [0, 0]


def test_discard_keeps_the_samples_when_every_one_throttled(fake_cuda, monkeypatch):
    forward = _nvml_run(monkeypatch, FakeNvml(reasons=lambda n: SW_THERMAL),
                        discard_throttled=True)
    assert forward["measure.throttled"] == [1, 1, 1, 1] and len(forward["measure.time"]) == 4
    assert "measure.discarded_throttled" not in forward


def _op(name, kernels_us=(), children=(), device_type="DeviceType.CPU"):
    return SimpleNamespace(name=name, device_type=device_type, cpu_children=list(children),
                           kernels=[SimpleNamespace(duration=d) for d in kernels_us])


def test_kernel_sums_add_every_kernel_an_op_in_the_range_launched():
    mm = _op("aten::mm", children=[_op("cudaLaunchKernel", [12.0])])
    add = _op("aten::add", [3.0, 2.0])
    events = [_op(f"{RANGE_PREFIX}0", children=[mm, add]),
              _op(f"{RANGE_PREFIX}0", [99.0], device_type="DeviceType.CUDA"),  # GPU annotation
              _op(f"{RANGE_PREFIX}1", children=[_op("aten::mm", [10.0])]),
              _op(f"{RANGE_PREFIX}7", [1.0]), _op("aten::zero_", [50.0])]
    assert kernel_sums(events, 2) == {0: pytest.approx(0.017), 1: pytest.approx(0.010)}


class FakeProfiler:
    def __init__(self, log):
        self.log = log

    def __enter__(self):
        self.log.append("start")
        return self

    def __exit__(self, *exc):
        self.log.append("stop")

    def events(self):
        return [_op(f"{RANGE_PREFIX}{i}", [100.0 * (i + 1)]) for i in range(3)]


def test_time_kernels_profiles_each_call_in_its_range_after_the_barrier():
    log, clock = [], FakeCudaClock()

    class Range:
        def __init__(self, name):
            self.name = name

        def __enter__(self):
            log.append(self.name)

        def __exit__(self, *exc):
            pass

    sums = time_kernels(lambda: log.append("call"), 3, clock, lambda: log.append("prepare"),
                        profiler=lambda: FakeProfiler(log), annotate=Range)
    assert sums == {0: 0.1, 1: 0.2, 2: 0.3}
    assert log[:4] == ["start", "prepare", f"{RANGE_PREFIX}0", "call"] and log[-1] == "stop"
    assert clock.barriers == 3  # the L2 flush before each call, outside its range
    result = PassResult("forward", [], [0.5, 0.25, 0.6])
    add_kernel_times(result, sums)
    assert result.extra["measure.kernel_time"] == [0.1, 0.2, 0.3]
    assert result.extra["measure.launch_overhead"] == pytest.approx([0.4, 0.05, 0.3])


def test_finish_measure_adds_kernel_times_with_timer_kernel(monkeypatch):
    import param_compute.measure.kernel_time as kernel_time

    monkeypatch.setattr(kernel_time, "_torch_profiler", lambda: lambda: FakeProfiler([]))
    monkeypatch.setattr(kernel_time, "_torch_range", lambda name: _Null())
    result = PassResult("forward", [], [1.0, 1.0])
    options = SimpleNamespace(timer="kernel", discard_throttled=False)
    finish_measure(result, None, options, FakeCudaClock(), lambda: None, None)
    assert result.extra["measure.kernel_time"] == [0.1, 0.2]
    assert result.extra["measure.launch_overhead"] == pytest.approx([0.9, 0.8])
    plain = PassResult("forward", [], [1.0])
    finish_measure(plain, None, SimpleNamespace(timer="wall", discard_throttled=False),
                   FakeCudaClock(), lambda: None, None)
    assert plain.extra == {}


class _Null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass


def test_timer_kernel_needs_a_cuda_device(tmp_path):
    result = run_cli("-c", EXAMPLES / "simple_add.json", "--timer", "kernel", "--output",
                     tmp_path / "r.json")
    assert result.returncode == 2
    assert "--timer kernel times CUDA kernels: use -d cuda" in result.stderr


def test_reading_throttled_ignores_idle_and_application_clocks():
    assert not Reading(1980, IDLE | APP_CLOCKS).throttled
    assert Reading(1400, SW_THERMAL).throttled


def test_discard_throttled_is_refused_without_a_gpu(tmp_path):
    result = run_cli("-c", EXAMPLES / "simple_add.json", "--discard-throttled",
                     "--output", tmp_path / "r.json")
    assert result.returncode == 2
    assert "--discard-throttled drops samples taken while a GPU throttled" in result.stderr
    assert "needs -d cuda" in result.stderr
    assert not (tmp_path / "r.json").exists()
