"""Measurement features: the device seam (CUDA paths through fakes), adaptive iterations,
throughput, compile, profiling and traces, per-config cost."""

from __future__ import annotations

import gc
import json
import textwrap

import pytest

import param_compute
import param_compute.runtime.executor as executor_module
from conftest import EXAMPLES, read_results, run_cli, simple_op, tensor
import param_compute.measure.devices as devices_module
from param_compute.measure.devices import (CudaEventClock, Device, launch_cover_us,
                                           spin_cycles_per_us)


class FakeCudaClock:
    """Stands in for CUDA events: stamps are (device_ms, host_ms) pairs driven by ``advance``."""

    name = "fake_cuda"

    def __init__(self):
        self.device_ms = 0.0
        self.host_ms = 0.0
        self.barriers = 0
        self.barrier = self._barrier

    def stamp(self):
        # Every stamp is one "kernel" later: 0.5 ms of device time, 0.01 ms of host time.
        self.device_ms += 0.5
        self.host_ms += 0.01
        return self.device_ms, self.host_ms

    @staticmethod
    def elapsed_ms(start, end):
        return end[0] - start[0]

    @staticmethod
    def host_elapsed_ms(start, end):
        return end[1] - start[1]

    def synchronize(self):
        pass

    def _barrier(self):
        self.barriers += 1


class FakeCudaDevice(Device):
    def __init__(self):
        super().__init__("cuda:0", FakeCudaClock())
        self.resets = 0

    def reset_peak_memory(self):
        self.resets += 1

    def peak_memory_mb(self):
        return 12.5


@pytest.fixture
def fake_cuda(monkeypatch):
    device = FakeCudaDevice()
    monkeypatch.setattr(executor_module, "open_device", lambda name, flush_l2=True: device)
    return device


def test_cuda_paths_record_device_and_host_times_and_peak_memory(fake_cuda):
    spec = simple_op("torch.add", tensor(4), tensor(4))
    [record] = param_compute.run(spec, warmup=2, iteration=3, backward=True).records
    forward = record["metric"]["forward"]
    assert forward["measure.time"] == [0.5, 0.5, 0.5]  # event times, not host times
    assert forward["measure.host_time"] == pytest.approx([0.01] * 3)
    assert forward["measure.gpu.memory"] == [12.5] and forward["warmup.gpu.memory"] == [12.5]
    assert record["metric"]["backward"]["measure.gpu.memory"] == [12.5]
    # discrete: one barrier (sync + L2 flush) before every timed iteration of both passes
    assert fake_cuda.clock.barriers == 2 * (2 + 3)
    assert fake_cuda.resets == 4  # a fresh peak-memory window per phase and pass


def test_continuous_events_mode_has_no_barrier(fake_cuda):
    spec = simple_op("torch.add", tensor(4), tensor(4))
    [record] = param_compute.run(spec, warmup=1, iteration=4,
                                 exec_mode="continuous_events").records
    assert len(record["metric"]["forward"]["measure.time"]) == 4
    assert fake_cuda.clock.barriers == 0


class _RecordingCuda:
    """Stands in for ``torch`` inside ``CudaEventClock``: records what the barrier queues."""

    def __init__(self):
        self.calls = []
        outer = self

        class FakeEvent:
            def __init__(self, enable_timing=False):
                pass

            def record(self):
                outer.calls.append("event")

        class Buffer:
            def zero_(self):
                outer.calls.append("flush")

        class Cuda:
            Event = FakeEvent

            @staticmethod
            def synchronize(device=None):
                outer.calls.append("sync")

            @staticmethod
            def _sleep(cycles):
                outer.calls.append(("spin", cycles))

        self.cuda, self.buffer = Cuda, Buffer()


def test_cuda_barrier_flushes_then_covers_the_next_launch(monkeypatch):
    fake = _RecordingCuda()
    clock = CudaEventClock.__new__(CudaEventClock)
    clock._torch, clock.device, clock._event, clock._pool = fake, "cuda:0", fake.cuda.Event, []
    clock._flush_buffer, clock._cycles_per_us, clock._host_ns = fake.buffer, 1000.0, (0, 0)
    host_ns = iter([1_000_000, 1_030_000])  # the timed call took 30 µs of host time
    monkeypatch.setattr(devices_module.time, "perf_counter_ns", lambda: next(host_ns))
    clock._barrier()  # nothing timed yet: cover the assumed first launch
    first = int(launch_cover_us(None) * 1000)
    clock.stamp(), clock.stamp()
    clock._barrier()
    assert fake.calls == ["sync", "flush", ("spin", first), "event", "event",
                          "sync", "flush", ("spin", 55_000)]  # (1.5 x 30 + 10) µs
    assert launch_cover_us(None) == 70.0 and launch_cover_us(2.0) == 13.0
    assert launch_cover_us(5_000.0) == 100.0  # a host-bound call is not turned into a replay


def test_without_torch_cuda_sleep_nothing_covers_the_launch(monkeypatch):
    import torch

    monkeypatch.delattr(torch.cuda, "_sleep")
    assert spin_cycles_per_us.__wrapped__(0) == 0.0
    fake = _RecordingCuda()
    clock = CudaEventClock.__new__(CudaEventClock)
    clock._torch, clock._flush_buffer, clock.device = fake, fake.buffer, "cuda:0"
    clock._cycles_per_us, clock._host_ns = 0.0, (0, 0)
    clock._barrier()
    assert fake.calls == ["sync", "flush"]


def test_cuda_graph_needs_a_cuda_device(tmp_path):
    # As PARAM: off CUDA a warning, and the run goes on without the graph.
    result = run_cli("-c", EXAMPLES / "simple_add.json", "--cuda-graph", "--output",
                     tmp_path / "r.json")
    assert result.returncode == 0
    assert "--cuda-graph needs a CUDA device; running on cpu without it" in result.stderr
    assert (tmp_path / "r.json").exists()


def test_cuda_device_is_refused_cleanly_without_cuda(tmp_path):
    result = run_cli("-c", EXAMPLES / "simple_add.json", "-d", "cuda:0", "--output",
                     tmp_path / "r.json")
    assert result.returncode == 2 and "CUDA is not available" in result.stderr
    assert "Traceback" not in result.stderr


SLEEPY = textwrap.dedent("""
    import time
    from param_compute import OperatorInterface, register_operator

    class Sleep(OperatorInterface):
        def forward(self, seconds):
            time.sleep(seconds)

    register_operator("test.sleep", Sleep)
""")


def test_min_time_keeps_measuring_until_reached_and_max_iteration_caps(tmp_path):
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "sleepy.py").write_text(SLEEPY)
    spec = simple_op("test.sleep", {"type": "float", "value": 0.002})
    [adaptive] = param_compute.run(spec, workloads_dirs=[tmp_path / "plugins"], warmup=0,
                                   iteration=2, min_time=0.04).records
    forward = adaptive["metric"]["forward"]
    assert sum(forward["measure.time"]) >= 40
    assert forward["measure.iterations"] == [len(forward["measure.time"])]  # a list, as PARAM's
    assert len(forward["measure.time"]) > 2
    [capped] = param_compute.run(spec, workloads_dirs=[tmp_path / "plugins"], warmup=0,
                                 iteration=2, min_time=10.0, max_iteration=6).records
    assert capped["metric"]["forward"]["measure.iterations"] == [6]


def test_throughput_counts_flops_and_bytes_once_outside_timing():
    m, k, n = 64, 128, 32
    spec = simple_op("torch.mm", tensor(m, k), tensor(k, n))
    [record] = param_compute.run(spec, warmup=1, iteration=5, backward=True).records
    forward, backward = record["throughput"]["forward"], record["throughput"]["backward"]
    assert forward["flops"] == 2 * m * k * n
    assert forward["bytes"] == (m * k + k * n + m * n) * 4
    assert backward["flops"] == 2 * forward["flops"]  # grad wrt both inputs
    assert backward["bytes"] == (m * n + m * k + k * n) * 4  # grad out in, two grads out
    median_s = record["stats"]["forward"]["median"] / 1e3
    assert forward["tflops_per_s"] == pytest.approx(forward["flops"] / median_s / 1e12)
    assert forward["gb_per_s"] == pytest.approx(forward["bytes"] / median_s / 1e9)
    [bare] = param_compute.run(spec, throughput=False).records
    assert "throughput" not in bare


def test_no_forced_garbage_collection_per_config(monkeypatch, shared_configs):
    calls = []
    monkeypatch.setattr(gc, "collect", lambda *a, **k: calls.append(1) or 0)
    result = param_compute.run(shared_configs / "simple_add_range.json", warmup=1, iteration=2)
    assert result.summary.ok == 33 and calls == []


def test_pt2_model_reports_compile_time_apart_from_iterations():
    spec = simple_op("torch.nn.functional.gelu", tensor(32, 32))
    [record] = param_compute.run(spec, warmup=1, iteration=3, pt2_model=True).records
    forward = record["metric"]["forward"]
    assert record["status"] == "ok" and len(forward["compile.time"]) == 1
    assert forward["compile.time"][0] > 10 * max(forward["measure.time"])


def test_profile_and_execution_trace_are_written_beside_the_results(tmp_path):
    out = tmp_path / "sub" / "run.json"
    result = run_cli("-c", EXAMPLES / "simple_add.json", "-p", "--et", "-i", "2", "--output", out)
    assert result.returncode == 0, result.stderr
    finish = read_results(out)[2]
    trace = json.loads((tmp_path / "sub" / "run_trace.json").read_text())
    names = {event.get("name") for event in trace["traceEvents"]}
    assert {"param_compute|torch.add|0|0|0", "param_compute|torch.add|0|0|0|measure|forward",
            "param_compute|torch.add|0|0|0|warmup|forward"} <= names
    et = json.loads((tmp_path / "sub" / "run_et.json").read_text())
    assert "param_compute|torch.add|0|0|0" in {node["name"] for node in et["nodes"]}
    assert finish["trace_file"] == str(tmp_path / "sub" / "run_trace.json")
    assert finish["et_file"] == str(tmp_path / "sub" / "run_et.json")


def test_noisy_records_are_flagged(fake_cuda):
    times = iter([1.0, 1.0, 1.0, 5.0] * 10)
    fake_cuda.clock.elapsed_ms = lambda start, end: next(times)
    [record] = param_compute.run(simple_op("torch.add", tensor(2), tensor(2)),
                                 warmup=0, iteration=4).records
    assert record["noisy"] == ["forward"] and record["stats"]["forward"]["cv"] > 0.1
