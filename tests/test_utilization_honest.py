"""Utilization people can believe: views move no data, in-place ops count what they read and
write, each dtype is set against its own peak, cache-resident data is not a percentage of DRAM
bandwidth, and calibrate keeps no peaks measured on a busy machine."""

from __future__ import annotations

import json

import pytest

import param_compute
import param_compute.measure.calibrate as calibrate_module
from conftest import run_cli, simple_op, tensor, write_spec
from param_compute.results.utilization import percent_of_peak, utilization
from param_compute.measure.peaks import read_cache


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("PARAM_COMPUTE_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _bytes(spec, **options):
    [record] = param_compute.run(spec, warmup=0, iteration=2, **options).records
    assert record["status"] == "ok", record
    return record["throughput"]


@pytest.mark.parametrize("name", ["torch.t", "torch.detach", "aten::view_as", "aten::t"])
def test_views_and_aliases_move_no_bytes(name):
    args = [tensor(512, 256)] + ([tensor(512, 256)] if name.endswith("view_as") else [])
    throughput = _bytes(simple_op(name, *args))
    assert throughput["forward"]["bytes"] == 0
    assert throughput["forward"]["flops"] == 0


def test_in_place_op_counts_its_reads_and_its_write():
    n = 1 << 16
    throughput = _bytes(simple_op("aten::add_.Tensor", tensor(n, requires_grad=False),
                                  tensor(n, requires_grad=False)))
    assert throughput["forward"]["bytes"] == 3 * 4 * n  # self and other read, self written


def test_a_copying_op_still_counts_inputs_and_outputs():
    throughput = _bytes(simple_op("torch.clone", tensor(1024)), backward=True)
    assert throughput["forward"]["bytes"] == 2 * 4 * 1024
    assert throughput["backward"]["bytes"] == 2 * 4 * 1024  # grad out in, grad of input out


def test_bf16_pass_is_not_set_against_the_fp32_peak(tmp_path):
    peaks = write_spec(tmp_path, {"flops_per_s": {"float32": 1e12}, "bytes_per_s": 1e10},
                       "peaks.json")
    spec = simple_op("torch.mm", tensor(64, 64, dtype="bfloat16", requires_grad=False),
                     tensor(64, 64, dtype="bfloat16", requires_grad=False))
    rates = _bytes(spec, peaks=str(peaks))["forward"]
    assert "flops_util" not in rates and "util" not in rates
    assert percent_of_peak(rates) == "-"
    fp32 = _bytes(simple_op("torch.mm", tensor(64, 64, requires_grad=False),
                            tensor(64, 64, requires_grad=False)), peaks=str(peaks))["forward"]
    assert fp32["flops_util"] > 0 and percent_of_peak(fp32) != "-"


def test_above_the_memory_peak_the_cell_says_cache_not_a_percentage():
    peaks = {"flops_per_s": 1e12, "bytes_per_s": 1e9}
    assert percent_of_peak(utilization(0, 30_000, 1e-6, peaks)) == "cache"  # 3000%
    assert percent_of_peak(utilization(0, 500, 1e-6, peaks)) == "50% mem"
    assert percent_of_peak(utilization(10**9, 1_000, 1e-4, peaks)) == ">100% FLOP"
    assert percent_of_peak(utilization(10**7, 1_000, 1e-4, peaks)) == "10% FLOP"


@pytest.fixture
def small_calibration(monkeypatch):
    monkeypatch.setattr(calibrate_module, "CPU_GEMM_SIZES", (32, 64))
    monkeypatch.setattr(calibrate_module, "CPU_STREAM_ELEMENTS", 1 << 16)
    measured = []
    real = calibrate_module._measure_all
    monkeypatch.setattr(calibrate_module, "_measure_all",
                        lambda *a: measured.append(1) or real(*a))
    return measured


def test_calibrate_on_a_busy_machine_repeats_then_caches_nothing(monkeypatch, small_calibration,
                                                                 caplog):
    monkeypatch.setattr(calibrate_module, "BUSY_ENOUGH", 2.0)  # no block is ever busy enough
    entry = calibrate_module.calibrate(seconds=0.01)
    assert entry["disturbed"] is True and "path" not in entry
    assert len(small_calibration) == calibrate_module.ATTEMPTS
    assert read_cache() == {}
    assert caplog.text.count("ran on a busy machine") == calibrate_module.ATTEMPTS
    done = run_cli("--seconds", "0.01", module="param_compute.calibrate")
    assert done.returncode == 1
    assert "not cached: the machine was busy" in done.stderr and "--force" in done.stderr
    assert read_cache() == {}
    forced = run_cli("--seconds", "0.01", "--force", module="param_compute.calibrate")
    assert forced.returncode == 0, forced.stderr
    [cached] = read_cache().values()
    assert cached["busy_fraction"] < 2.0 and "disturbed" not in cached


def test_calibrate_on_an_idle_machine_measures_once_caches_and_restores_threads(
        monkeypatch, small_calibration):
    import torch

    monkeypatch.setattr(calibrate_module, "BUSY_ENOUGH", 0.0)
    before = torch.get_num_threads()
    entry = calibrate_module.calibrate(seconds=0.01, threads=before + 1)
    assert len(small_calibration) == 1 and "disturbed" not in entry
    assert json.loads(open(entry["path"]).read())[entry["key"]]["threads"] == before + 1
    assert torch.get_num_threads() == before  # a library call leaves the process as found


def test_best_of_two_measurements_keeps_each_peaks_maximum():
    a = {"flops_per_s": {"float32": 5.0, "float64": 1.0}, "bytes_per_s": 3.0, "detail": "a"}
    b = {"flops_per_s": {"float32": 4.0, "float64": 2.0}, "bytes_per_s": 4.0, "detail": "b"}
    best = calibrate_module._best(a, b)
    assert best == {"flops_per_s": {"float32": 5.0, "float64": 2.0}, "bytes_per_s": 4.0,
                    "detail": "b"}
