"""Machine peaks and utilization: calibrate, the per-machine cache, --peaks files, the bound,
targets (record, OSS JSON, exit status) and the report's roofline."""

from __future__ import annotations

import json

import pytest

import param_compute
import param_compute.measure.calibrate as calibrate_module
from conftest import read_results, run_cli, simple_op, tensor, write_spec
from param_compute.analysis.roofline import roofline_svg
from param_compute.results.targets import evaluate_target
from param_compute.results.utilization import percent_of_peak, utilization
from param_compute.measure.peaks import cache_path, machine_key, read_cache


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    """Every test here gets its own cache: the user's is never read or written."""
    monkeypatch.setenv("PARAM_COMPUTE_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _mm_and_add(target=None):
    spec = {**simple_op("torch.mm", tensor(1024, 1024, requires_grad=False),
                        tensor(1024, 1024, requires_grad=False)),
            **simple_op("torch.add", tensor(1 << 24, requires_grad=False),
                        tensor(1 << 24, requires_grad=False))}
    if target:
        spec["torch.mm"]["config"][0]["target"] = target
    return spec


def test_calibrate_then_mm_and_add_report_utilization_within_the_roofs(tmp_path, cache_dir):
    # --force: the suite shares the cores, so the measurement may well be judged disturbed
    done = run_cli("--seconds", "0.1", "--force", module="param_compute.calibrate")
    assert done.returncode == 0, done.stderr
    assert "peak float32" in done.stdout and "peak bandwidth" in done.stdout
    [entry] = read_cache().values()
    assert entry["threads"] == 1 and entry["flops_per_s"]["float32"] > 1e9
    assert entry["bytes_per_s"] > 1e9 and str(cache_dir) in str(cache_path())
    mm, add = param_compute.run(_mm_and_add(), warmup=1, iteration=3).records
    mm_rates, add_rates = mm["throughput"]["forward"], add["throughput"]["forward"]
    assert 0 < mm_rates["flops_util"] <= 1.2 and mm_rates["bound"] == "compute"
    assert 0 < add_rates["bw_util"] <= 1.2 and add_rates["bound"] == "memory"
    assert mm_rates["flops_util"] == pytest.approx(
        mm_rates["tflops_per_s"] * 1e12 / entry["flops_per_s"]["float32"])
    # another thread count is another machine setup: no peaks, no utilization
    [other] = param_compute.run(simple_op("torch.relu", tensor(8)), num_threads=2).records
    assert "bw_util" not in other["throughput"]["forward"]


def test_cache_keeps_each_setup_and_merges_dtypes(monkeypatch):
    monkeypatch.setattr(calibrate_module, "CPU_GEMM_SIZES", (32, 64))
    calibrate_module.calibrate(dtypes=["float32"], seconds=0.01, stream_elements=1 << 16,
                               force=True)  # the shared cores may make it look disturbed
    entry = calibrate_module.calibrate(dtypes=["float64"], seconds=0.01, force=True,
                                       stream_elements=1 << 16)
    cached = read_cache()[entry["key"]]
    assert set(cached["flops_per_s"]) == {"float32", "float64"}
    assert entry["key"] == machine_key(entry["device_name"], "cpu", entry["torch"], 1)
    assert calibrate_module.spec_dtypes_from(
        {"op": {"config": [{"input": [{"args": [tensor(2, dtype="half"),
                                                tensor(2, dtype="int")]}]}]}}) == ["float16"]


def test_peaks_file_by_hand_gives_exact_utilization(tmp_path):
    peaks = tmp_path / "peaks.json"
    peaks.write_text(json.dumps({"flops_per_s": {"float": 1e12}, "bytes_per_s": 1e11}))
    [record] = param_compute.run(simple_op("torch.mm", tensor(64, 64), tensor(64, 64)),
                                 warmup=1, iteration=5, peaks=str(peaks)).records
    rates = record["throughput"]["forward"]
    seconds = record["stats"]["forward"]["median"] / 1e3
    assert rates["flops_util"] == pytest.approx(2 * 64 ** 3 / seconds / 1e12)
    assert rates["bw_util"] == pytest.approx(3 * 64 * 64 * 4 / seconds / 1e11)
    assert rates["intensity"] == pytest.approx(2 * 64 ** 3 / (3 * 64 * 64 * 4))
    # intensity 10.7 FLOP/byte against a balance of 10: compute-bound
    assert rates["bound"] == "compute" and rates["util"] == rates["flops_util"]


@pytest.mark.parametrize("content, message", [
    ('{"flops_per_s": {"float32": -1}}', "$.flops_per_s.float32: must be a positive number"),
    ('{"flops_per_s": {"int8": 5}}', "$.flops_per_s.int8: not a floating dtype"),
    ('{"bytes_per_s": "fast"}', "$.bytes_per_s: must be a positive number"),
    ('{"peak": 3}', "$.peak: unknown key"),
    ('[1]', "$: must be an object"),
    ('{"flops_per_s": ', "not JSON"),
])
def test_bad_peaks_file_is_refused_before_anything_runs(tmp_path, content, message):
    peaks = tmp_path / "peaks.json"
    peaks.write_text(content)
    spec = write_spec(tmp_path, simple_op("torch.add", tensor(4), tensor(4)))
    done = run_cli("-c", spec, "--peaks", peaks, "--output", tmp_path / "r.json")
    assert done.returncode == 2 and message in done.stderr and str(peaks) in done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "r.json").exists()


def test_bound_follows_intensity_against_machine_balance():
    peaks = {"flops_per_s": 1e12, "bytes_per_s": 1e11}  # balance: 10 FLOP/byte
    memory = utilization(1_000, 1_000, 1e-6, peaks)  # 1 FLOP/byte
    assert memory["bound"] == "memory" and memory["util"] == pytest.approx(1e9 / 1e11)
    assert utilization(0, 1_000, 1e-6, peaks)["bound"] == "memory"
    assert utilization(None, 1_000, 1e-6, None) == {}
    assert percent_of_peak(memory) == "1% mem" and percent_of_peak({}) == "-"


def test_unmet_target_is_recorded_exported_and_fails_the_run_when_asked(tmp_path):
    spec = write_spec(tmp_path, {**simple_op("torch.add", tensor(64), tensor(64))})
    raw = json.loads(spec.read_text())
    raw["torch.add"]["config"][0]["target"] = {"metric": "latency_ms", "value": 1e-9}
    spec.write_text(json.dumps(raw))
    out, oss = tmp_path / "r.json", tmp_path / "oss.json"
    done = run_cli("-c", spec, "-i", "5", "--output", out, "--oss-json", oss)
    assert done.returncode == 0  # a missed target alone does not fail the run
    [record] = read_results(out)[1]
    target = record["target"]
    assert target["metric"] == "latency_ms" and target["value"] == 1e-9
    assert target["met"] is False and target["actual"] == record["stats"]["forward"]["median"]
    latency = [e for e in json.loads(oss.read_text()) if e["metric"]["name"] == "latency(ms)"]
    assert latency[0]["metric"]["target_value"] == 1e-9
    strict = run_cli("-c", spec, "-i", "5", "--output", out, "--fail-on-target-miss")
    assert strict.returncode == 1 and "missed its target" in strict.stderr
    raw["torch.add"]["config"][0]["target"] = {"metric": "latency_ms", "value": 1e6}
    spec.write_text(json.dumps(raw))
    met = run_cli("-c", spec, "-i", "5", "--output", out, "--fail-on-target-miss")
    assert met.returncode == 0 and read_results(out)[1][0]["target"]["met"] is True


def test_target_metrics_and_directions():
    stats = {"forward": {"median": 2.0}}
    rates = {"forward": {"tflops_per_s": 0.5, "gb_per_s": 10.0, "flops_util": 0.4}}
    assert evaluate_target({"metric": "tflops", "value": 0.5}, stats, rates)["met"] is True
    assert evaluate_target({"metric": "gbps", "value": 11}, stats, rates)["met"] is False
    miss = evaluate_target({"metric": "bw_util", "value": 0.1}, stats, rates)
    assert miss == {"metric": "bw_util", "value": 0.1, "actual": None, "met": False}
    back = evaluate_target({"metric": "latency_ms", "value": 5, "pass": "backward"}, stats,
                           rates)
    assert back["met"] is False and back["pass"] == "backward"


def test_bad_target_in_a_spec_is_refused(tmp_path):
    raw = simple_op("torch.add", tensor(4), tensor(4))
    raw["torch.add"]["config"][0]["target"] = {"metric": "speed", "value": 1}
    spec = write_spec(tmp_path, raw)
    done = run_cli("-c", spec, "--output", tmp_path / "r.json")
    assert done.returncode == 2 and "target" in done.stderr and "metric" in done.stderr


def test_report_draws_every_run_on_the_roofline(tmp_path):
    peaks = tmp_path / "peaks.json"
    peaks.write_text(json.dumps({"flops_per_s": {"float32": 1e11}, "bytes_per_s": 1e10}))
    spec = write_spec(tmp_path, {**simple_op("torch.mm", tensor(32, 32), tensor(32, 32)),
                                 **simple_op("torch.add", tensor(256), tensor(256))})
    out = tmp_path / "r.json"
    assert run_cli("-c", spec, "-i", "3", "--peaks", peaks, "--output", out).returncode == 0
    svg = roofline_svg(read_results(out)[1])
    assert svg.count("<circle") == 2 and "100 TFLOP/s" not in svg and "0.1 TFLOP/s" in svg
    assert "10 GB/s" in svg
    report = run_cli(out, "-o", tmp_path / "r.html", module="param_compute.report")
    assert report.returncode == 0, report.stderr
    html = (tmp_path / "r.html").read_text()
    assert "<h2>Roofline</h2>" in html and html.count("<circle") == 2
