"""Peaks files and the peaks cache are untrusted input: regular files only, bounded reads,
physical rates; utilization is always a finite number; the suite never sees the user's cache."""

from __future__ import annotations

import json
import math
import os

import pytest

import param_compute
from conftest import SANDBOX_CACHE, read_results, run_cli, simple_op, tensor, write_spec
from param_compute.results.utilization import utilization
from param_compute.measure.calibrate import key_for
from param_compute.measure.peaks import MAX_PEAKS_BYTES, cache_path


@pytest.fixture
def spec(tmp_path):
    return write_spec(tmp_path, simple_op("torch.mm", tensor(16, 16), tensor(16, 16)))


def _refused(done, output, *fragments):
    assert done.returncode == 2, (done.stdout, done.stderr)
    for fragment in fragments:
        assert fragment in done.stderr
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr
    assert not output.exists()  # refused before any run: not even a header-only file


@pytest.mark.parametrize("kind, message", [("fifo", "is a FIFO"), ("device", "is a device"),
                                           ("directory", "is a directory"),
                                           ("huge", f"over the {MAX_PEAKS_BYTES}-byte limit"),
                                           ("deep", "not JSON: nested too deep")])
def test_peaks_file_that_is_no_small_regular_file_is_refused_without_hanging(
        tmp_path, spec, kind, message):
    peaks = tmp_path / "peaks.json"
    if kind == "fifo":
        os.mkfifo(peaks)  # nobody ever writes to it: a blocking open would wait forever
    elif kind == "device":
        peaks.symlink_to("/dev/zero")  # endless: an unbounded read would exhaust memory
    elif kind == "directory":
        peaks.mkdir()
    elif kind == "deep":
        peaks.write_text("[" * 200_000 + "]" * 200_000)
    else:
        peaks.write_text('{"bytes_per_s": 1e11' + " " * MAX_PEAKS_BYTES + "}")
    done = run_cli("-c", spec, "--peaks", peaks, "--output", tmp_path / "r.json")
    _refused(done, tmp_path / "r.json", f"--peaks {peaks}", message)


@pytest.mark.parametrize("text, key", [
    ('{"flops_per_s": {"float32": 5e-324}}', "$.flops_per_s.float32"),
    ('{"flops_per_s": {"float32": 0}}', "$.flops_per_s.float32"),
    ('{"flops_per_s": {"float": 1e300}}', "$.flops_per_s.float"),
    ('{"flops_per_s": {"float32": NaN}}', "$.flops_per_s.float32"),
    ('{"bytes_per_s": Infinity}', "$.bytes_per_s"),
    ('{"bytes_per_s": -5}', "$.bytes_per_s"),
    ('{"bytes_per_s": 1e17}', "$.bytes_per_s"),
    ('{"bytes_per_s": true}', "$.bytes_per_s"),
])
def test_non_physical_peaks_are_refused_naming_file_and_key(tmp_path, spec, text, key):
    peaks = tmp_path / "peaks.json"
    peaks.write_text(text)
    done = run_cli("-c", spec, "--peaks", peaks, "--output", tmp_path / "r.json")
    _refused(done, tmp_path / "r.json", f"--peaks {peaks}: {key}:")


@pytest.mark.parametrize("kind", ["fifo", "device", "not json", "bad entry"])
def test_unusable_peaks_cache_is_refused_before_any_run(tmp_path, monkeypatch, spec, kind):
    monkeypatch.setenv("PARAM_COMPUTE_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "cache").mkdir()
    cache = tmp_path / "cache" / "peaks.json"
    if kind == "fifo":
        os.mkfifo(cache)
    elif kind == "device":
        cache.symlink_to("/dev/zero")
    elif kind == "not json":
        cache.write_text("{")
    else:
        key = key_for("cpu", 1)
        cache.write_text(json.dumps({key: {"flops_per_s": {"float32": 5e-324}}}))
    done = run_cli("-c", spec, "--output", tmp_path / "r.json")
    _refused(done, tmp_path / "r.json", f"peaks cache {cache}")
    if kind == "bad entry":
        assert f"[{key}]: $.flops_per_s.float32: 5e-324 FLOP/s is not a machine's peak" \
            in done.stderr
    shown = run_cli("--show", module="param_compute.calibrate")
    assert shown.returncode == 2 and f"peaks cache {cache}" in shown.stderr
    if kind != "bad entry":  # an unreadable cache is refused before measuring
        measured = run_cli("--seconds", "1e-3", module="param_compute.calibrate")
        assert measured.returncode == 2 and f"peaks cache {cache}" in measured.stderr
    # --no-throughput and --dry-run use no peaks: the cache is not read
    assert run_cli("-c", spec, "--no-throughput", "--output", tmp_path / "n.json").returncode == 0


def test_utilization_is_always_a_finite_number_or_left_out():
    worst = [(10 ** 400, 10 ** 400, 1e-300, {"flops_per_s": 5e-324, "bytes_per_s": 5e-324}),
             (1, 1, 1e-9, {"flops_per_s": float("nan"), "bytes_per_s": float("inf")}),
             (10 ** 400, 1, 1.0, {"flops_per_s": 1e12, "bytes_per_s": 1e11}),
             (1, 1, float("nan"), {"flops_per_s": 1e12, "bytes_per_s": 1e11})]
    for flops, nbytes, seconds, peaks in worst:
        out = utilization(flops, nbytes, seconds, peaks)
        numbers = [v for v in out.values() if isinstance(v, float)]
        assert all(math.isfinite(v) for v in numbers), out
        json.dumps(out, allow_nan=False)
    assert "flops_util" not in utilization(10 ** 400, 1, 1.0, {"flops_per_s": 1e12})


def test_results_with_extreme_but_valid_peaks_are_strict_json(tmp_path, spec):
    peaks = tmp_path / "peaks.json"
    peaks.write_text('{"flops_per_s": {"float32": 1000}, "bytes_per_s": 1000}')
    done = run_cli("-c", spec, "--peaks", peaks, "-i", "2", "--output", tmp_path / "r.json")
    assert done.returncode == 0, done.stderr
    for line in (tmp_path / "r.json").read_text().splitlines():
        json.loads(line, parse_constant=lambda name: pytest.fail(f"{name} in results"))
    [record] = read_results(tmp_path / "r.json")[1]
    assert record["throughput"]["forward"]["flops_util"] > 1  # absurd, but a number


def test_the_suite_runs_with_its_own_empty_cache_home(monkeypatch):
    """conftest points XDG_CACHE_HOME at a fresh folder for this process and every process it
    starts, and drops PARAM_COMPUTE_CACHE_DIR: a calibrated user cache is never read."""
    assert os.environ["XDG_CACHE_HOME"] == str(SANDBOX_CACHE)
    assert "PARAM_COMPUTE_CACHE_DIR" not in os.environ
    assert cache_path() == SANDBOX_CACHE / "param_compute" / "peaks.json"
    [record] = param_compute.run(simple_op("torch.mm", tensor(8, 8), tensor(8, 8)),
                                 iteration=1).records
    assert "flops_util" not in record["throughput"]["forward"]  # no peaks: none in the sandbox
    # ... and so does every process the tests start (forked from the zygote, or spawned)
    shown = run_cli("--show", module="param_compute.calibrate", forked=True)
    assert shown.returncode == 1
    assert f"no peaks cached for this setup in {cache_path()}" in shown.stdout
