"""Hostile results files (issue 20), each probe kept: the regression gate fails closed, merge
stops at unusable lines, wrong types and bounded reads in every results tool, and the tools
stream (memory by runs, not by records or samples). The files are in ``hostile_results/``
(see its README)."""

from __future__ import annotations

import gc
import json
import math
import os
import tracemalloc
from pathlib import Path

import pytest

from conftest import run_cli
from param_compute.analysis.compare import CSV_COLUMNS, GATE_REASONS, compare_files
from param_compute.results.file import ResultsStream

HOSTILE = Path(__file__).parent / "hostile_results"
COMPARE = "param_compute.analysis.compare"
MERGE = "param_compute.analysis.merge"
TOOLS = {  # module, arguments after the results file (OUT: the output folder)
    "compare": (COMPARE, lambda f, out: [HOSTILE / "base.json", f]),
    "merge": (MERGE, lambda f, out: ["-o", out / "m.json", f]),
    "exporters": ("param_compute.results.sinks.export",
                  lambda f, out: [f, "--csv", out / "x.csv", "--oss-json", out / "o.json"]),
    "report": ("param_compute.analysis.report", lambda f, out: [f, "-o", out / "r.html"]),
    "workload_totals": ("param_compute.analysis.workload_totals", lambda f, out: [f]),
}


def _compare(*args):
    return run_cli(*[HOSTILE / a if str(a).endswith(".json") else a for a in args],
                   module=COMPARE)


def _tool(name, path, out):
    module, argv = TOOLS[name]
    return run_cli(*argv(path, out), module=module)


def _shard(path: Path, tmp_path: Path) -> Path:
    """A copy of a results file whose header makes it shard 0 of 1 (what merge takes), the
    rest byte for byte."""
    first, rest = path.read_bytes().split(b"\n", 1)
    header = json.loads(first)
    header["shard"] = {"index": 0, "count": 1, "plan_digest": "p"}
    copy = tmp_path / f"shard_{path.name}"
    copy.write_bytes(json.dumps(header).encode() + b"\n" + rest)
    return copy


# --- the gate ---------------------------------------------------------------------------------

@pytest.mark.parametrize("new, reason", [
    ("new_missing.json", "missing"), ("new_failed.json", "failed"),
    ("new_unmeasured.json", "unmeasured"), ("new_nonfinite.json", "non-finite"),
    ("new_status.json", "status"), ("new_config.json", "config")])
def test_a_run_measured_in_base_and_not_judged_in_new_fails_the_gate(new, reason, tmp_path):
    gated = _compare("base.json", new, "--fail-on-regression", "20", "--csv", tmp_path / "c.csv")
    assert gated.returncode == 1, gated.stdout + gated.stderr
    assert f"not judged in NEW ({reason} 1)" in gated.stdout
    assert "regression gate failed" in gated.stdout and "Traceback" not in gated.stderr
    # the table names the run and the reason; the CSV lists it with the reason as verdict
    [line] = [line for line in gated.stdout.splitlines() if "0|0|0_1" in line and "│" in line]
    assert reason in line
    rows = (tmp_path / "c.csv").read_text().splitlines()
    assert rows[-1].startswith("torch.add,0|0|0_1,forward,")
    assert rows[-1].split(",")[CSV_COLUMNS.index("verdict")] == reason
    assert len(rows) == 1 + 3  # two compared runs, one not judged
    # without the gate: informative, the same reason shown, exit 0
    plain = _compare("base.json", new)
    assert plain.returncode == 0 and f"not judged: {reason} 1" in plain.stdout


def test_every_reason_word_has_a_probe():
    assert set(GATE_REASONS) == {"missing", "failed", "unmeasured", "non-finite", "status",
                                 "config"}


def test_a_new_file_without_run_records_fails_the_gate():
    result = _compare("base.json", "new_header_only.json", "--fail-on-regression", "20")
    assert result.returncode == 1
    assert "NEW has no run records" in result.stdout.split("regression gate failed")[1]
    assert "missing 3" in result.stdout


def test_files_whose_settings_differ_fail_the_gate_unless_across_settings():
    result = _compare("base.json", "new_threads.json", "--fail-on-regression", "20")
    assert result.returncode == 1
    assert "settings differ (num_threads: 1 in BASE, 2 in NEW" in result.stdout
    across = _compare("base.json", "new_threads.json", "--fail-on-regression", "20",
                      "--across-settings")  # compared now: 3x slower fails as a regression
    assert across.returncode == 1 and "3 run(s) significantly slower" in across.stdout
    assert "settings differ (" not in across.stdout.split("regression gate failed")[1]
    assert _compare("base.json", "new_threads.json", "--fail-on-regression", "250",
                    "--across-settings").returncode == 0
    assert _compare("base.json", "new_threads.json").returncode == 0  # informative only


def test_a_file_compared_with_itself_passes_and_a_base_without_runs_judges_nothing():
    assert _compare("base.json", "base.json", "--fail-on-regression", "0").returncode == 0
    nothing = _compare("new_header_only.json", "new_header_only.json", "--fail-on-regression",
                       "20")
    assert nothing.returncode == 1 and "NEW has no run records" in nothing.stdout


def test_a_run_failed_in_both_files_is_no_new_failure(tmp_path):
    lines = (HOSTILE / "new_failed.json").read_text()
    (tmp_path / "a.json").write_text(lines)
    result = run_cli(tmp_path / "a.json", HOSTILE / "new_failed.json", "--fail-on-regression",
                     "20", module=COMPARE)
    assert result.returncode == 0, result.stdout
    assert "not judged" not in result.stdout and "not measured in BASE: 1" in result.stdout


def test_records_without_a_status_are_judged_as_param_wrote_them(tmp_path):
    """PARAM's records have no status: measured runs, judged by their times either way."""
    lines = [json.loads(line) for line in (HOSTILE / "base.json").read_text().splitlines()]
    for line in lines:
        line.pop("status", None)
    param = tmp_path / "param.json"
    param.write_text("".join(json.dumps(line) + "\n" for line in lines))
    for base, new in ((HOSTILE / "base.json", param), (param, HOSTILE / "base.json")):
        result = run_cli(base, new, "--fail-on-regression", "20", module=COMPARE)
        assert result.returncode == 0, result.stdout
        assert "regression gate passed" in result.stdout


def test_a_later_record_of_a_run_replaces_an_earlier_one(tmp_path):
    """An appended file (-a) holds a run twice; the later record is the one judged."""
    base = (HOSTILE / "base.json").read_text().splitlines()
    failed = (HOSTILE / "new_failed.json").read_text().splitlines()
    appended = tmp_path / "appended.json"
    appended.write_text("\n".join(failed + base) + "\n")  # failed first, then measured again
    assert run_cli(HOSTILE / "base.json", appended, "--fail-on-regression", "20",
                   module=COMPARE).returncode == 0
    appended.write_text("\n".join(base + failed) + "\n")  # measured first, then failed
    result = run_cli(HOSTILE / "base.json", appended, "--fail-on-regression", "20",
                     module=COMPARE)
    assert result.returncode == 1 and "(failed 1)" in result.stdout


# --- merge ------------------------------------------------------------------------------------

def test_merge_stops_at_unusable_lines_and_names_them(tmp_path):
    out = tmp_path / "m.json"
    result = run_cli("-o", out, HOSTILE / "shard0.json", HOSTILE / "shard1.json", module=MERGE)
    assert result.returncode == 1, result.stderr
    assert f"error: {HOSTILE / 'shard1.json'}:3: not JSON" in result.stderr
    assert f"error: {HOSTILE / 'shard1.json'}:4: run record's count is not a whole number" \
        in result.stderr
    assert "2 unusable line(s)" in result.stderr and "--skip-damaged" in result.stderr
    assert not out.exists()
    skipped = run_cli("-o", out, HOSTILE / "shard0.json", HOSTILE / "shard1.json",
                      "--skip-damaged", module=MERGE)
    assert skipped.returncode == 0, skipped.stderr
    assert f"skipped: {HOSTILE / 'shard1.json'}:3: not JSON" in skipped.stderr
    assert f"skipped: {HOSTILE / 'shard1.json'}:4:" in skipped.stderr
    records = [json.loads(line) for line in out.read_text().splitlines()[1:-1]]
    assert [r["id"] for r in records] == ["0|0|0_0", "0|0|0_1", "0|0|0_2", "0|0|0_4"]
    assert "2 damaged line(s) skipped" in skipped.stdout


def test_merge_refuses_a_torn_shard_unless_told(tmp_path):
    out = tmp_path / "m.json"
    args = ("-o", out, HOSTILE / "shard0.json", HOSTILE / "torn_shard1.json")
    result = run_cli(*args, module=MERGE)
    assert result.returncode == 1 and f"{HOSTILE / 'torn_shard1.json'}:4: torn last line" \
        in result.stderr
    assert run_cli(*args, "--skip-damaged", module=MERGE).returncode == 0
    assert len(out.read_text().splitlines()) == 2 + 5


# --- wrong types, damaged lines: every tool -----------------------------------------------------

@pytest.mark.parametrize("tool", sorted(set(TOOLS) - {"merge"}))  # merge: shard1.json above
def test_wrong_types_are_named_by_file_line_and_field(tool, tmp_path):
    path = HOSTILE / "wrong_types.json"
    result = _tool(tool, path, tmp_path)
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr
    for line, field in ((3, "count"), (4, "original_us.cpu"), (5, "stats.forward.median"),
                        (6, "metric.forward.measure.time"), (7, "count")):
        assert f"{path}:{line}: run record's {field} is not" in result.stderr, (tool, field)
    assert result.returncode == 0, result.stderr  # compare: informative without a gate
    if tool == "workload_totals":  # the two usable runs, 2 calls each
        assert "over 2 calls in 1 configs" in result.stdout  # the one usable run


@pytest.mark.parametrize("tool", sorted(set(TOOLS) - {"merge"}))
def test_numbers_too_large_for_a_float_are_wrong_types(tool, tmp_path):
    """A count or a median of 10**400 would end in an OverflowError where it meets a float."""
    lines = (HOSTILE / "base.json").read_text().splitlines()
    huge_count, huge_median = json.loads(lines[1]), json.loads(lines[2])
    huge_count["count"] = 10**400
    huge_median["stats"] = {"forward": {"n": 6, "median": 10**400}}
    path = tmp_path / "huge.json"
    path.write_text("\n".join([lines[0], json.dumps(huge_count), json.dumps(huge_median),
                               *lines[3:]]) + "\n")
    out = tmp_path / "out"
    out.mkdir()
    result = _tool(tool, path, out)
    assert result.returncode == 0 and "Traceback" not in result.stderr
    assert f"{path}:2: run record's count is not a whole number from 0 to" in result.stderr
    assert f"{path}:3: run record's stats.forward.median is not a number" in result.stderr


def test_workload_totals_skips_a_string_count_in_process(tmp_path, capsys):
    from param_compute.analysis.workload_totals import main

    assert main([str(HOSTILE / "wrong_types.json")]) == 0
    captured = capsys.readouterr()
    assert "5 line(s) of" in captured.err and "not used" in captured.err


@pytest.mark.parametrize("tool", sorted(TOOLS))
def test_a_damaged_line_is_named_and_left_out(tool, tmp_path):
    path = HOSTILE / "damaged_line.json"
    if tool == "merge":
        path = _shard(path, tmp_path)
    result = _tool(tool, path, tmp_path)
    assert f"{path}:3: not JSON" in result.stderr and "Traceback" not in result.stderr
    assert result.returncode == (1 if tool == "merge" else 0)  # compare: run 1 is missing


# --- bounded reads: regular files only, lines capped ------------------------------------------

@pytest.mark.parametrize("tool", sorted(TOOLS))
def test_a_fifo_or_a_device_is_refused(tool, tmp_path):
    fifo = tmp_path / "results.fifo"
    os.mkfifo(fifo)
    out = tmp_path / "out"
    out.mkdir()
    result = _tool(tool, fifo, out)  # would block forever if opened for reading
    assert result.returncode == 2 and f"{fifo}: is a FIFO, not a regular file" in result.stderr
    if Path("/dev/zero").exists():
        result = _tool(tool, Path("/dev/zero"), out)
        assert result.returncode == 2 and "/dev/zero: is a device" in result.stderr
    assert list(out.iterdir()) == []


@pytest.mark.parametrize("tool", sorted(TOOLS))
def test_an_over_long_line_is_skipped_unread_and_named(tool, tmp_path, monkeypatch):
    """The cap is 64 MiB; lowered here to 4 KiB so that a 40 KiB line stands for a 2 GB one."""
    monkeypatch.setattr("param_compute.results.file.reading.MAX_LINE_BYTES", 4096)
    lines = (HOSTILE / "base.json").read_text().splitlines()
    long = json.loads(lines[2])
    long["metric"]["forward"]["measure.time"] = [1.0] * 8000
    path = tmp_path / "long.json"
    path.write_text("\n".join([lines[0], lines[1], json.dumps(long), *lines[3:]]) + "\n")
    if tool == "merge":
        path = _shard(path, tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    result = _tool(tool, path, out)
    assert result.returncode == (1 if tool == "merge" else 0)
    assert f"{path}:3: longer than 4096 bytes: skipped" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_the_line_cap_holds_one_chunk_not_the_line(tmp_path, monkeypatch):
    monkeypatch.setattr("param_compute.results.file.reading.MAX_LINE_BYTES", 1 << 16)
    lines = (HOSTILE / "base.json").read_text().splitlines()
    path = tmp_path / "long.json"
    with open(path, "w") as stream:
        stream.write(lines[0] + "\n" + lines[1] + "\n")
        for _ in range(64):  # one 16 MiB line
            stream.write("7" * (1 << 18))
        stream.write("\n" + "\n".join(lines[2:]) + "\n")
    tracemalloc.start()
    try:
        stream = ResultsStream(path)
        ids = [record["id"] for _, record in stream]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert ids == ["0|0|0_0", "0|0|0_1", "0|0|0_2"]
    assert stream.problems[0].line == 3 and "longer than 65536 bytes" in stream.problems[0].reason
    assert peak < 4 * (1 << 16) + (1 << 20)  # a few chunks, never the 16 MiB


# --- streaming: memory by runs, not by records or samples ---------------------------------------

def _results(path: Path, runs: int, samples: int = 40, copies: int = 1, offset: int = 0) -> Path:
    """A results file of ``runs`` runs (``copies`` appended runs of the same ids)."""
    header = json.loads((HOSTILE / "base.json").read_text().splitlines()[0])
    header["shard"] = {"index": 0, "count": 1, "plan_digest": "p", "ops": ["torch.add"]}
    with open(path, "w") as stream:
        for _ in range(copies):
            stream.write(json.dumps(header) + "\n")
            for i in range(offset, offset + runs):
                times = [1.0 + i / 1000 + k / 10000 for k in range(samples)]
                stream.write(json.dumps({
                    "op_name": "torch.add", "id": f"0|0|0_{i}", "status": "ok", "count": 1,
                    "metric": {"forward": {"measure.time": times}},
                    "config": {"input": {"args": [{"shape": [i]}]}}}) + "\n")
            stream.write('{"finish_time": "t"}\n')
    return path


def _peak(action) -> int:
    gc.collect()
    tracemalloc.start()
    try:
        action()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_the_reader_is_an_iterator_holding_one_record(tmp_path):
    path = _results(tmp_path / "r.json", 50)
    stream = ResultsStream(path)
    records = iter(stream)
    assert next(records)[1]["id"] == "0|0|0_0" and stream.records_read == 1
    assert next(records)[0] == 3 and stream.records_read == 2  # line numbers
    with pytest.raises(RuntimeError, match="read once"):
        iter(stream).__next__()


@pytest.mark.parametrize("tool", sorted(TOOLS))
def test_a_tool_keeps_per_run_summaries_not_records(tool, tmp_path, capsys):
    """The same 1500 runs, once and appended twice: memory does not grow with the records;
    and 4x the samples per run does not grow it 4-fold (the samples are dropped)."""
    once = _results(tmp_path / "once.json", 1500)
    twice = _results(tmp_path / "twice.json", 1500, copies=2)
    more = _results(tmp_path / "more.json", 1500, samples=160)
    out = tmp_path / "out"
    out.mkdir()
    if tool == "report":
        pytest.importorskip("matplotlib")

    def run(path):
        module, argv = TOOLS[tool]
        argv = argv(path, out)
        if tool == "compare":
            argv = [path, path, "--resamples", "0"]
        if tool == "merge":
            argv += ["--skip-damaged"]  # the appended copy repeats runs: kept once
        return lambda: run_cli(*argv, module=module)

    peaks = {path.name: _peak(run(path)) for path in (once, twice, more)}
    capsys.readouterr()
    assert peaks["twice.json"] < 1.3 * peaks["once.json"], peaks
    if tool == "compare":  # BASE keeps each run's sorted times: 8 bytes a sample
        assert peaks["more.json"] < 1.3 * peaks["once.json"] + 1500 * 120 * 8 * 1.5, peaks
    else:
        assert peaks["more.json"] < 1.3 * peaks["once.json"], peaks


def test_compare_judges_runs_as_the_whole_file_reader_did(tmp_path):
    """Streaming changes no verdict: a NEW slower by half in every run is slower in each."""
    base = _results(tmp_path / "base.json", 30, samples=8)
    lines = base.read_text().splitlines()
    slower = []
    for line in lines:
        value = json.loads(line)
        if "metric" in value:
            value["metric"]["forward"]["measure.time"] = [
                1.5 * t for t in value["metric"]["forward"]["measure.time"]]
        slower.append(json.dumps(value))
    new = tmp_path / "new.json"
    new.write_text("\n".join(slower) + "\n")
    report = compare_files(base, new, resamples=200, warn=False)
    assert len(report.rows) == 30 and not report.gate
    assert all(row.result.verdict == "slower" for row in report.rows)
    assert all(math.isclose(row.result.speedup, 1 / 1.5) for row in report.rows)
    assert report.gate_failures() == []


@pytest.mark.parametrize("tool", sorted(set(TOOLS) - {"merge"}))
def test_an_op_name_longer_than_any_real_one_is_a_damaged_line(tool, tmp_path):
    """A 200,000-character op name would be printed whole in every table and history series."""
    lines = (HOSTILE / "base.json").read_text().splitlines()
    long_name = json.loads(lines[1])
    long_name["op_name"] = "x" * 200_000
    path = tmp_path / "long.json"
    path.write_text("\n".join([lines[0], json.dumps(long_name), *lines[2:]]) + "\n")
    out = tmp_path / "out"
    out.mkdir()
    result = _tool(tool, path, out)
    assert result.returncode == 0 and "Traceback" not in result.stderr
    assert f"{path}:2: run record's op_name is longer than 1000 characters" in result.stderr
    assert "x" * 1001 not in result.stdout
