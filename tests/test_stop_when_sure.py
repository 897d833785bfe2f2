"""Stop when sure, bounded samples, memory per op (issue 23 items 3, 7, 8): --max-noise and its
stop reasons, --keep-samples thinning with statistics from every sample, peak_bytes."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from types import SimpleNamespace

import pytest

import param_compute
from conftest import REPO, run_cli, simple_op, tensor, write_spec
from param_compute.results.records import PassResult
from param_compute.results.stats import summarize, thin
from param_compute.measure import host_memory
from param_compute.measure.devices import CudaDevice, Device
from param_compute.measure.measurer import Measurer, relative_half_width
from param_compute.measure.protocol import PARAM
from param_compute.runtime.options import RunOptions
from param_compute.measure.ranges import Annotator
from test_measure_protocol import SettlingClock

RUN = SimpleNamespace(op_name="torch.fake", id="0|0|0")


class CostClock(SettlingClock):
    """A host clock (CPU time paired) where each call of ``op`` costs ``cost(i)`` ms."""

    name = "host"


def measure(cost, **options):
    clock = CostClock(cost)
    options = RunOptions(canary=False, **{"warmup": 0, **options}).check()
    measurer = Measurer(options.measuring(), Device("cpu", clock), Annotator(profiling=False))
    return measurer.measure(clock.op, None, "forward", (RUN.op_name, RUN.id)), clock


def test_a_steady_op_stops_as_soon_as_the_interval_is_tight():
    rng = random.Random(1)
    result, clock = measure(lambda i: 1.0 + rng.uniform(-0.005, 0.005), iteration=1,
                            max_noise=1.0)
    stats = result.stats()
    assert stats["stop_reason"] == "noise"
    assert PARAM["min_samples"] <= stats["n"] <= 20 and result.iterations == clock.calls == stats["n"]
    assert relative_half_width(result.measure_ms) <= 0.01


def test_a_noisy_op_runs_until_max_time():
    rng = random.Random(2)
    result, clock = measure(lambda i: rng.uniform(1.0, 3.0), iteration=1, max_noise=1.0,
                            max_time=0.2)
    stats = result.stats()
    assert stats["stop_reason"] == "max_time"
    assert 200.0 <= clock.now < 260.0  # not far past --max-time


def test_max_iteration_and_min_time_bound_it():
    result, _ = measure(lambda i: 1.0 + (i % 7) / 3, iteration=1, max_noise=1.0,
                        max_iteration=50)
    assert result.stats()["stop_reason"] == "max_iteration" and result.iterations == 50
    result, clock = measure(lambda i: 1.0, iteration=1, max_noise=1.0, min_time=0.1)
    assert result.stats()["stop_reason"] == "noise" and clock.now >= 100.0
    result, _ = measure(lambda i: 1.0, iteration=1, min_time=0.05)
    assert result.stats()["stop_reason"] == "min_time"
    result, _ = measure(lambda i: 1.0, iteration=1, min_time=10.0, max_iteration=8)
    assert result.stats()["stop_reason"] == "max_iteration"
    result, _ = measure(lambda i: 1.0, iteration=3)
    assert "stop_reason" not in result.stats()


@pytest.mark.parametrize("bad, message", [
    ({"max_noise": -1.0}, "--max-noise"), ({"max_noise": 1.0, "iteration": 0}, "--max-noise"),
    ({"max_noise": 1.0, "min_time": 2.0, "max_time": 1.0}, "--max-time"),
    ({"keep_samples": 0}, "--keep-samples"),
    ({"max_time": float("nan")}, "--max-time must be >= 0 seconds and finite, got nan"),
    ({"max_time": -1.0}, "--max-time must be >= 0 seconds and finite, got -1.0"),
    ({"min_time": float("inf")}, "--min-time must be >= 0 seconds and finite, got inf"),
    ({"min_time": float("nan")}, "--min-time must be >= 0 seconds and finite, got nan"),
    ({"warmup_time": float("nan")}, "--warmup-time must be >= 0 seconds and finite, got nan")])
def test_bad_bounds_are_refused(bad, message):
    with pytest.raises(param_compute.errors.OptionsError, match=message):
        RunOptions(**bad).check()


def test_thin_keeps_evenly_spread_values():
    assert thin(list(range(10)), 4) == [0, 3, 6, 9]
    assert thin(list(range(3)), 5) == [0, 1, 2]
    assert thin(list(range(7)), 1) == [0] and thin([1, 2], 0) == []


def test_many_iterations_keep_at_most_n_times_with_stats_from_all():
    costs = [1.0 + (i % 100) / 100 for i in range(5000)]
    result, _ = measure(lambda i: costs[i], iteration=5000, keep_samples=100)
    stats = result.stats()
    assert len(result.measure_ms) == 100 and stats["n"] == 5000 and stats["kept"] == 100
    assert stats == pytest.approx({**summarize(costs), **result.facts})
    metric = result.metric()
    assert len(metric["measure.time"]) == 100 and len(metric["measure.cpu_time"]) == 100
    assert len(metric["measure.gpu.memory"]) == 100


def test_a_real_run_writes_at_most_keep_samples_times(tmp_path):
    spec = simple_op("torch.add", tensor(8), tensor(8))
    [record] = param_compute.run(spec, iteration=3000, keep_samples=50, canary=False).records
    forward = record["metric"]["forward"]
    assert len(forward["measure.time"]) == 50 and record["stats"]["forward"]["n"] == 3000
    assert forward["measure.iterations"] == [3000]
    assert record["stats"]["forward"]["kept"] == 50
    # below the bound nothing is thinned and nothing says so
    [record] = param_compute.run(spec, iteration=30, keep_samples=50, canary=False).records
    assert len(record["metric"]["forward"]["measure.time"]) == 30
    assert "kept" not in record["stats"]["forward"]


def test_pass_result_thinning_keeps_parallel_lists_aligned():
    result = PassResult("forward", [], [float(i) for i in range(10)],
                        extra={"measure.host_time": [float(i) for i in range(10)]})
    result.keep_at_most(4, ("measure.host_time",))
    assert result.measure_ms == result.extra["measure.host_time"] == [0.0, 3.0, 6.0, 9.0]
    assert result.stats()["n"] == 10 and result.stats()["median"] == 4.5


RSS_WINDOW = """
import gc, json
from param_compute.measure import host_memory
gc.collect()
gc.disable()
window = host_memory.RssWindow()
window.start()
if not window.peak_resets:
    print(json.dumps(None))
    raise SystemExit(0)
block = bytearray(64 << 20)  # touched: zero-filled pages become resident as written
block[::4096] = b"\\x01" * len(block[::4096])
del block
first = window.peak_bytes()
window.start()
print(json.dumps([first, window.peak_bytes()]))
"""


def test_rss_window_sees_a_transient_allocation():
    # In a process of its own: in a long-lived test worker, memory that earlier tests' threads
    # free while the window is open lowers the resident set by as much as this allocates.
    done = subprocess.run([sys.executable, "-c", RSS_WINDOW], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=120)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    if seen is None:
        pytest.skip("this kernel does not let the peak RSS be reset")
    first, after = seen
    assert first >= 60 << 20
    assert after < 32 << 20


def test_rss_window_without_proc(monkeypatch, tmp_path):
    monkeypatch.setattr(host_memory, "STATM", str(tmp_path / "absent"))
    window = host_memory.RssWindow()
    window.start()
    assert window.peak_bytes() is None


def test_a_run_records_peak_bytes():
    spec = simple_op("torch.mm", tensor(512, 512), tensor(512, 512))
    [record] = param_compute.run(spec, iteration=2, canary=False).records
    peak = record["stats"]["forward"]["peak_bytes"]
    assert isinstance(peak, int) and peak >= 0


def test_cuda_peak_bytes_is_the_allocator_peak_above_the_start():
    class FakeCuda:
        allocated, peak = 1000, 0

        def reset_peak_memory_stats(self, device):
            self.peak = self.allocated

        def memory_allocated(self, device):
            return self.allocated

        def max_memory_allocated(self, device):
            return self.peak

    device = object.__new__(CudaDevice)
    device._torch = SimpleNamespace(cuda=FakeCuda())
    device.clock = SimpleNamespace(device="cuda:0")
    device.reset_peak_memory()
    device._torch.cuda.peak = 5000  # the pass allocated 4000 bytes more at its peak
    assert device.peak_bytes() == 4000 and device.peak_memory_mb() == 5000 / 2**20


def test_the_flags_on_the_command_line_and_through_a_worker(tmp_path):
    from conftest import run_cli, write_spec
    from param_compute.results.file import read_results

    spec = write_spec(tmp_path, simple_op("torch.add", tensor(8), tensor(8)))
    out = tmp_path / "r.json"
    done = run_cli("-c", str(spec), "--max-noise", "5", "--max-time", "2", "--keep-samples",
                   "7", "--isolate", "--no-canary", "--output", str(out))
    assert done.returncode == 0, done.stderr
    read = read_results(out)
    [record] = read.records
    stats = record["stats"]["forward"]
    assert stats["stop_reason"] in ("noise", "max_time") and stats["n"] >= PARAM["min_samples"]
    assert len(record["metric"]["forward"]["measure.time"]) == 7 and stats["kept"] == 7
    assert "descheduled" in stats and "peak_bytes" in stats
    options = read.run_options
    assert (options["max_noise"], options["max_time"], options["keep_samples"],
            options["canary"], options["timer"]) == (5.0, 2.0, 7, False, "wall")


def test_a_non_finite_time_bound_is_one_line_exit_2(tmp_path):
    spec = write_spec(tmp_path, simple_op("torch.add", tensor(4), tensor(4)))
    for flag in ("--min-time", "--max-time", "--warmup-time"):
        done = run_cli("-c", spec, flag, "nan", "--output", tmp_path / "r.json")
        assert done.returncode == 2
        assert done.stderr.strip().splitlines()[-1] == \
            f"error: {flag} must be >= 0 seconds and finite, got nan"
        assert not (tmp_path / "r.json").exists()
