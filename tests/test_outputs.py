"""More outputs from the same records: --csv and --oss-json, and the exporters command."""

from __future__ import annotations

import csv
import json

import pytest

from conftest import read_results, run_cli, simple_op, tensor, write_spec
from param_compute.plan.summary import (dtypes_summary, estimate_cost, params_summary,
                                        shapes_summary, varying_features)
from param_compute.results.sinks.export import CSV_COLUMNS

SWEEP = {
    **simple_op("torch.add", tensor(16, 32), {"type": "int", "value": [1, 4],
                                              "__range__": ["value"]},
                iterator="RangeConfigIterator"),
    **simple_op("torch.mm", tensor(8, 16), tensor(16, 4, dtype="double")),  # fails: dtypes
}


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("outputs")
    out = tmp / "r.json"
    result = run_cli("-c", write_spec(tmp, SWEEP), "-i", "3", "-b", "--output", out,
                     "--csv", tmp / "r.csv", "--oss-json", tmp / "r_oss.json")
    assert result.returncode == 1, result.stderr  # torch.mm of float by double fails
    return tmp, read_results(out)


def _csv(path):
    with open(path, newline="") as stream:
        return list(csv.DictReader(stream))


def test_csv_has_a_row_per_run_and_pass(exported):
    tmp, (_, records, _) = exported
    rows = _csv(tmp / "r.csv")
    assert list(rows[0]) == CSV_COLUMNS
    ok = [r for r in records if r["status"] == "ok"]
    assert len(ok) == 4 and len(records) == 5
    # each measured run: a forward and a backward row; the failed run: one row, its error
    assert len(rows) == 2 * len(ok) + 1
    assert [(r["op"], r["id"]) for r in rows] == [
        (r["op_name"], r["id"]) for r in records for _ in range(2 if r["status"] == "ok" else 1)]
    for row, (record, name) in zip(rows, [(r, p) for r in ok for p in ("forward", "backward")]):
        stats = record["stats"][name]
        assert row["pass"] == name and row["status"] == "ok"
        assert int(row["n"]) == stats["n"] == 3
        assert float(row["median_ms"]) == pytest.approx(stats["median"], rel=1e-5)
        assert float(row["p10_ms"]) <= float(row["median_ms"]) <= float(row["p90_ms"])
        assert float(row["gb_per_s"]) > 0 and int(row["bytes"]) > 0
        assert row["shapes"] == "16x32" and row["dtypes"] == "float32"
    assert [r["params"] for r in rows[:8:2]] == ["arg1=1", "arg1=2", "arg1=3", "arg1=4"]
    failed = rows[-1]
    assert failed["op"] == "torch.mm" and failed["status"] == "error" and failed["pass"] == ""
    assert failed["median_ms"] == "" and "RuntimeError" in failed["error"]
    assert failed["shapes"] == "8x16;16x4" and failed["dtypes"] == "float32;float64"


def test_oss_json_is_the_benchmark_database_layout(exported):
    tmp, (header, records, _) = exported
    entries = json.loads((tmp / "r_oss.json").read_text())
    assert isinstance(entries, list) and entries
    names = {e["metric"]["name"] for e in entries}
    assert {"latency(ms)", "memory_bandwidth(GB/s)"} <= names
    for entry in entries:
        assert set(entry) == {"benchmark", "model", "metric", "runners", "dependencies"}
        benchmark, model, metric = entry["benchmark"], entry["model"], entry["metric"]
        assert benchmark["name"] == "param_compute" and benchmark["dtype"] == "float32"
        assert benchmark["mode"] in ("inference", "training")
        assert benchmark["extra_info"]["device"] == "cpu" and benchmark["extra_info"]["arch"]
        assert model["type"] == "operator" and model["origins"] == ["param_compute"]
        assert model["name"].startswith("torch.add|")
        assert isinstance(metric["benchmark_values"], list) and len(metric["benchmark_values"]) == 1
        assert metric["target_value"] == 0.0
        assert entry["dependencies"]["pytorch"]["version"] == header["sys_info"]["pytorch_version"]
    latency = {(e["model"]["name"], e["benchmark"]["extra_info"]["pass"]):
               e["metric"]["benchmark_values"][0] for e in entries
               if e["metric"]["name"] == "latency(ms)"}
    assert len(latency) == 8  # 4 measured runs x 2 passes; the failed run exports nothing
    first = records[0]
    assert latency[(f"torch.add|{first['id']}", "backward")] == first["stats"]["backward"]["median"]


def test_exporters_command_converts_a_results_file(exported, tmp_path):
    tmp, _ = exported
    result = run_cli(tmp / "r.json", "--csv", tmp_path / "again.csv", "--oss-json",
                     tmp_path / "again.json", module="param_compute.results.sinks.export")
    assert result.returncode == 0, result.stderr
    assert _csv(tmp_path / "again.csv") == _csv(tmp / "r.csv")
    assert json.loads((tmp_path / "again.json").read_text()) == json.loads(
        (tmp / "r_oss.json").read_text())
    bad = run_cli(tmp_path / "missing.json", "--csv", tmp_path / "x.csv",
                  module="param_compute.results.sinks.export")
    assert bad.returncode == 2 and "no such file" in bad.stderr and "Traceback" not in bad.stderr


def test_config_summaries():
    config = {"build": {"args": [{"type": "int", "value": 16}]},
              "input": {"args": [tensor(4, 16), {"type": "genericlist", "value": [
                  tensor(2, dtype="long"), {"type": "float", "value": 0.5}]}],
                        "kwargs": {"alpha": {"type": "int", "value": 2},
                                   "out": tensor(4, 8, dtype="half")}}}
    assert shapes_summary(config) == "4x16;arg1[0]=2;out=4x8"
    assert dtypes_summary(config) == "float32;int64;float16"
    assert params_summary(config) == "build.arg0=16;arg1[1]=0.5;alpha=2"
    def cost(op, *shapes):
        return estimate_cost(op, {"input": {"args": [tensor(*s) for s in shapes]}})

    # a matmul costs its FLOPs, an add its bytes; tiny runs cost the fixed overhead
    assert cost("torch.mm", (1024, 1024), (1024, 1024)) > 4 * cost("torch.mm", (512, 512),
                                                                    (512, 512))
    assert cost("torch.mm", (512, 512), (512, 512)) > 2 * cost("torch.add", (512, 512),
                                                                (512, 512))
    assert cost("torch.add", (4096, 4096), (4096, 4096)) > 10 * cost("torch.add", (512, 512),
                                                                      (512, 512))
    assert cost("torch.add", (2,), (2,)) == pytest.approx(cost("torch.add", (4,), (4,)),
                                                          rel=1e-3)
    columns, aliases = varying_features([
        {"input": {"args": [tensor(4, n), tensor(n, 8)]}} for n in (1, 2, 3)])
    assert list(columns) == ["arg0.shape[1]"] and aliases["arg0.shape[1]"] == ["arg1.shape[0]"]


class _Declaring:
    """A sink that writes lines of its own through the results sink and declares what it adds
    to the finish line and the summary; it sits *after* the results sink."""

    def __init__(self, writer, interrupt_at_end=False):
        self.writer = writer
        self.interrupt_at_end = interrupt_at_end
        self.seen = []

    def start(self, total):
        pass

    def before_run(self, run):
        if self.seen:
            self.writer.write_line({"note": f"after {self.seen[-1]}"})

    def run_done(self, run, record):
        self.seen.append(run.id)

    def end_runs(self, summary):
        self.writer.write_line({"note": "end"})
        if self.interrupt_at_end:
            from param_compute.process.signals import Interrupted

            raise Interrupted(15)

    def finish_fields(self, summary):
        return {"notes_written": len(self.seen)}

    def summary_lines(self, summary):
        return [f"declaring sink: {len(self.seen)} runs seen"]

    def finish(self, summary):
        pass


@pytest.mark.parametrize("interrupt", [False, True])
def test_sinks_declare_finish_fields_and_summary_lines_in_any_order(tmp_path, interrupt):
    import io

    from rich.console import Console

    from param_compute.results.file import read_results as read_file
    from param_compute.results.sinks.console import ConsoleReporter
    from param_compute.results.sinks.jsonl import JsonlResultWriter
    from param_compute.runtime.engine import Engine
    from param_compute.runtime.options import RunOptions
    from param_compute.runtime.toolchain import Toolchain

    toolchain = Toolchain.start()
    spec = toolchain.load(simple_op("torch.add", tensor([1, 3], __range__=["shape"]),
                                    iterator="RangeConfigIterator"))
    options = RunOptions(dry_run=True)
    path = tmp_path / "r.json"
    header = {"run_options": options.to_json(), "sys_info": {}, "start_time": "t"}
    writer = JsonlResultWriter(path, header)
    printed = io.StringIO()
    console = ConsoleReporter(str(path), progress=False,
                              console=Console(file=printed, width=200))
    declaring = _Declaring(writer, interrupt)
    summary = Engine(spec, options, toolchain, [writer, console, declaring]).run()
    read = read_file(path)
    notes = [value["note"] for _, value in read.extras]
    assert notes == ["after 0|0|0_0", "after 0|0|0_1", "end"]  # between the runs, in order
    assert [line for line, _ in read.extras] == [3, 5, 7]
    assert read.finish["notes_written"] == 3 and read.finish["runs_dry"] == 3
    assert "declaring sink: 3 runs seen" in printed.getvalue()
    assert summary.finish_fields == {"notes_written": 3}
    assert read.finish.get("interrupted") == ("SIGTERM" if interrupt else None)
