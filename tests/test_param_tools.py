"""The results tools (compare, report, exporters) read results files that PARAM itself wrote."""

from __future__ import annotations

import csv
import json
import statistics

import pytest

from conftest import REPO, SHARED_CONFIGS
from param_compute.cli.run_benchmark import main as run_benchmark
from param_compute.analysis.compare import main as compare
from param_compute.results.file import load_results
from param_compute.results.fields import measured_passes
from param_compute.analysis.report import main as report
from param_compute.results.sinks.export import main as exporters

PARAM_COMPAT = REPO.parent / "shared" / "param-compat"


@pytest.fixture
def param_results():
    if not (PARAM_COMPAT / "param_results_mm_range.json").is_file():
        pytest.skip("../shared/param-compat is not beside this checkout")
    return {name: PARAM_COMPAT / f"param_results_{name}.json" for name in ("simple_add", "mm_range")}


def _measure_times(path):
    lines = [json.loads(line) for line in path.read_text().splitlines()[1:-1]]
    return {f"{r['op_name']}|{r['id']}": r["metric"]["forward"]["measure.time"] for r in lines}


def test_stats_are_computed_from_measure_time_where_param_wrote_none(param_results):
    path = param_results["mm_range"]
    times = _measure_times(path)
    records = load_results(path).records
    assert len(records) == 70 and all("stats" not in json.loads(line)
                                      for line in path.read_text().splitlines()[1:-1])
    for record in records:
        [(name, stats)] = list(measured_passes(record))
        assert name == "forward"
        values = times[f"{record['op_name']}|{record['id']}"]
        assert stats["n"] == 3 and stats["median"] == statistics.median(values)
        assert stats["min"] == min(values) and stats["max"] == max(values)


def test_compare_reads_param_s_results_files(param_results, tmp_path):
    for name, path in param_results.items():
        out = tmp_path / f"{name}.csv"
        assert compare([str(path), str(path), "--csv", str(out), "--fail-on-regression", "5"]) == 0
        rows = list(csv.DictReader(out.open()))
        assert len(rows) == len(_measure_times(path))
        assert {row["verdict"] for row in rows} == {"same"}
        assert all(float(row["speedup"]) == 1.0 for row in rows)


def test_compare_param_s_results_with_ours_of_the_same_spec(param_results, tmp_path):
    if not SHARED_CONFIGS.is_dir():
        pytest.skip("../shared/param-configs is not beside this checkout")
    ours = tmp_path / "ours.json"
    assert run_benchmark(["-c", str(SHARED_CONFIGS / "simple_add.json"), "-w", "1", "-i", "3",
                          "--output", str(ours), "--no-progress"]) == 0
    out = tmp_path / "cmp.csv"
    assert compare([str(param_results["simple_add"]), str(ours), "--csv", str(out)]) == 0
    [row] = list(csv.DictReader(out.open()))
    assert (row["op"], row["id"], row["pass"]) == ("torch.add", "0|0|0", "forward")
    assert row["base_n"] == row["new_n"] == "3" and float(row["new_median_ms"]) > 0


def test_report_and_exporters_read_param_s_results(param_results, tmp_path):
    html = tmp_path / "report.html"
    assert report([str(param_results["mm_range"]), "-o", str(html)]) == 0
    text = html.read_text()
    assert "torch.baddbmm" in text and "0|0|0_63" in text
    table = tmp_path / "runs.csv"
    assert exporters([str(param_results["simple_add"]), "--csv", str(table)]) == 0
    [row] = list(csv.DictReader(table.open()))
    assert row["op"] == "torch.add" and row["n"] == "3"
    assert float(row["median_ms"]) == statistics.median(
        _measure_times(param_results["simple_add"])["torch.add|0|0|0"])
