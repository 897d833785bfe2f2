"""The config column beyond the run table: compare (console and CSV) and a captured workload's
"where the time goes" (the run's summary and ``python -m param_compute.workload_totals``)."""

from __future__ import annotations

import csv
import io

from rich.console import Console

from conftest import run_cli, write_spec
from param_compute.results.sinks.console import print_workload_totals
from param_compute.results.totals import WorkloadTotals


def _t(*shape, dtype="float"):
    return {"type": "tensor", "dtype": dtype, "shape": list(shape), "requires_grad": False}


def captured_spec():
    """A captured workload in miniature: two mm configs with counts and original times."""
    def entry(m, k, n, count, cpu_us):
        return {"args": [_t(m, k), _t(k, n)], "count": count,
                "original_us": {"cpu": cpu_us, "device": None}}

    return {"torch.mm": {"input_data_generator": "PyTorch:DefaultDataGenerator",
                         "config": [{"input": [entry(16, 64, 32, 3, 20.0),
                                               entry(48, 64, 8, 7, 15.0)]}]}}


def _run(tmp_path, spec, name):
    out = tmp_path / f"{name}.json"
    result = run_cli("-c", write_spec(tmp_path, spec, f"{name}_spec.json"), "--output", out,
                     "-w", "2", "-i", "12")
    assert result.returncode == 0, result.stderr
    return out


def test_compare_table_and_csv_show_each_runs_config(tmp_path, monkeypatch):
    monkeypatch.setenv("COLUMNS", "160")  # room for the config column's whole labels
    spec = captured_spec()
    base, new = _run(tmp_path, spec, "base"), _run(tmp_path, spec, "new")
    table = tmp_path / "rows.csv"
    result = run_cli(base, new, "--csv", table, module="param_compute.compare")
    assert result.returncode == 0, result.stderr
    header = next(line for line in result.stdout.splitlines() if "speedup" in line)
    assert "config" in header
    assert "16×64·64×32 f32" in result.stdout and "48×64·64×8 f32" in result.stdout
    rows = list(csv.DictReader(table.open(encoding="utf-8")))
    assert [r["config"] for r in rows] == ["16×64·64×32 f32", "48×64·64×8 f32"]


def _totals():
    totals = WorkloadTotals()
    for run_id, (m, count, median) in {"0|0|0_0": (16, 3, 0.5), "0|0|0_1": (48, 7, 0.2)}.items():
        totals.add_json({"op_name": "torch.mm", "id": run_id, "status": "ok", "count": count,
                         "config": {"input": {"args": [_t(m, 64), _t(64, 8)]}},
                         "stats": {"forward": {"median": median}}})
    return totals


def test_where_the_time_goes_names_the_largest_configs():
    totals = _totals()
    top = totals.top_configs()
    assert [(t.id, t.config) for t in top] == [("0|0|0_0", "16×64·64×8 f32"),
                                               ("0|0|0_1", "48×64·64×8 f32")]
    assert top[0].total_ms == 1.5
    wide, narrow = io.StringIO(), io.StringIO()
    print_workload_totals(Console(file=wide, width=120), totals)
    print_workload_totals(Console(file=narrow, width=80), totals)
    assert "16×64·64×8 f32" in wide.getvalue()
    assert "16×64" not in narrow.getvalue()  # left out at 80 columns, never wrapped
    assert all(len(line) <= 80 for line in narrow.getvalue().splitlines())


def test_workload_totals_command_lists_configs_by_share(tmp_path):
    out = _run(tmp_path, captured_spec(), "captured")
    result = run_cli(out, module="param_compute.workload_totals")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("op ") and "config" in line)
    listed = lines[header + 2:header + 4]
    assert {line.split()[2] for line in listed} == {"16×64·64×32", "48×64·64×8"}


def test_where_the_time_goes_shows_a_file_s_op_name_as_it_is():
    totals = WorkloadTotals()
    totals.add_json({"op_name": "[/bold]evil\x07", "id": "0|0|0", "status": "ok", "count": 2,
                "stats": {"forward": {"median": 1.0}}, "config": {}})
    out = io.StringIO()
    print_workload_totals(Console(file=out, width=120), totals)
    assert out.getvalue().count("[/bold]evil\\x07") == 2, out.getvalue()
