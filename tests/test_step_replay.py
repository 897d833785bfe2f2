"""The step replay: the step file (format, hostile files), the dataflow a capture records, the
replay of a captured step in order (outputs feed their consumers), ``--replay-step`` end to end,
the fidelity ledger, and the profiler-cost calibration."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import REPO, run_cli
from param_compute.capture.live.dispatch import capture_ops
from param_compute.capture.trace.profiler_cost import calibrate, nested_counts
from param_compute.capture.step.dataflow import StepRecorder
from param_compute.spec.step_file import (StepFileError, read_step_file, step_path,
                                             validate_step, write_step_file)
from param_compute.analysis.ledger import build_ledger, format_ledger, ledger_section
from param_compute.results.file import upgraded


def _capture(function, path: Path):
    with capture_ops() as cap:
        function()
    cap.write(path)
    return json.loads(step_path(path).read_text())


def _mlp(x, w1, w2):
    return torch.softmax(torch.relu(x @ w1) @ w2, dim=-1)


# -- the step file ---------------------------------------------------------------------------
def test_recorder_round_trips_through_the_step_file(tmp_path):
    recorder = StepRecorder()
    a, b = ("mm", "s", "k0"), ("relu", "s", "k1")
    recorder.call(a, [([0], "x", "lx"), ([1], "w", "lw")], [([0], "y", "ly")], 3.5)
    recorder.call(None, [([0], "y", "ly")], [([0], "z", "lz")])  # not captured
    recorder.call(b, [([0], "y", "ly"), (["other", 1], "z", "lz")], [([0], "r", "lr")])
    recorder.call(b, [([0], "x2", "lx")], [])  # same layout as x: the same external
    keys = {a: "aten::mm|0|0|0", b: "aten::relu|0|0|1"}
    path = recorder.write(tmp_path / "spec.json", keys, "test")
    assert path == tmp_path / "spec.step.json"
    data = read_step_file(path)
    assert data["version"] == 1 and data["spec"] == "spec.json" and data["externals"] == 3
    calls = data["calls"]
    assert calls[0] == {"run": "aten::mm|0|0|0", "ext": [[[0], 0], [[1], 1]],
                        "original_us": 3.5}
    # fed by call 0's output 0; the uncaptured call's output is an external of its own
    assert calls[1] == {"run": "aten::relu|0|0|1", "in": [[[0], 0, [0]]],
                        "ext": [[["other", 1], 2]]}
    assert calls[2] == {"run": "aten::relu|0|0|1", "ext": [[[0], 0]]}


def _step(**changes):
    data = {"format": "param_compute.step", "version": 1, "externals": 1,
            "calls": [{"run": "aten::mm|0|0|0", "ext": [[[0], 0]]},
                      {"run": "aten::relu|0|0|0", "in": [[[0], 0, [0]]]}]}
    data.update(changes)
    return data


@pytest.mark.parametrize("data, where, words", [
    (_step(version=3), "version", "unsupported version 3"),
    (_step(version=2), "world_size", "the job's number of ranks"),
    (_step(format="x"), "format", "must be 'param_compute.step'"),
    (_step(calls={}), "calls", "must be a list"),
    (_step(calls=[{"run": "aten::mm"}]), "calls[0].run", "run key"),
    (_step(calls=[{"run": "a|0|0|0"}, {"run": "a|0|0|0", "in": [[[0], 1, [0]]]}]),
     "calls[1].in[0]", "producer 1 is not an earlier call"),
    (_step(calls=[{"run": "a|0|0|0", "in": [[[0], 0, [0]]]}]), "calls[0].in[0]",
     "first call cannot read"),
    (_step(calls=[{"run": "a|0|0|0", "ext": [[[0], 5]]}]), "calls[0].ext[0]",
     "external 5 is not one of the 1"),
    (_step(calls=[{"run": "a|0|0|0", "ext": [[["__class__()"], 0]]}]), "calls[0].ext[0]",
     "argument index or a keyword name"),
    (_step(calls=[{"run": "a|0|0|0", "ext": [[[-1], 0]]}]), "calls[0].ext[0]",
     "argument index"),
    (_step(calls=[{"run": "a|0|0|0"}, {"run": "a|0|0|0", "in": [[[0], 0, ["x"]]]}]),
     "calls[1].in[0]", "output must be"),
    (_step(calls=[{"run": "a|0|0|0", "original_us": -1}]), "calls[0].original_us", ">= 0"),
    (_step(calls=[{"run": "a|0|0|0", "faults": -3}]), "calls[0].faults", ">= 0"),
    (_step(calls=[{"run": "a|0|0|0"}, {"run": "a|0|0|0", "hold": [[[0], 0]]}]),
     "calls[1].hold[0]", "until 0 must be -1 (past the step's end) or a call from this one (1)"),
    (_step(calls=[{"run": "a|0|0|0", "hold": [[[0], 5]]}]), "calls[0].hold[0]",
     "to the last (0)"),
    (_step(calls=[{"run": "a|0|0|0", "hold": [[["x"], -1]]}]), "calls[0].hold[0]",
     "output must be"),
    (_step(calls=[{"run": "a|0|0|0", "hold": [[[0], True]]}]), "calls[0].hold[0]", "until true"),
    (_step(calls=[{"run": "a|0|0|0", "hold": {"0": 1}}]), "calls[0].hold", "must be a list"),
    (_step(calls=[{"run": "a|0|0|0", "faults": "many"}]), "calls[0].faults", "finite number"),
    (_step(real_step_us="fast"), "real_step_us", "finite number"),
    (_step(calls=[{"run": "a|0|0|0", "hold": [[[0], -1.0]]}]), "calls[0].hold[0]",
     "until -1.0 must be -1"),  # a call index, not a number
    (_step(calls=[{"run": "a|0|0|0", "hold": [[[0], -1]] * 4097}]), "calls[0].hold",
     "at most 4096 entries"),
    (_step(calls=[{"run": "a|0|0|0", "hold": [[[0, 1, 2], -1]]}]), "calls[0].hold[0]",
     "output must be"),
    (_step(calls=[{"run": "a|0|0|0", "hold": [[[0], -1, 3]]}]), "calls[0].hold[0]",
     "list of 2 items"),
    (_step(calls=[{"run": "a|0|0|0", "faults": 1e308}]), "calls[0].faults", "at most 1e15"),
    (_step(real_step_us=1e16), "real_step_us", "at most 1e15"),
    (_step(calls=[{"run": "a|0|0|0"}, {"run": "a|0|0|0", "hold": [[[0, 1], -1], [[0, 1], 1]]}]),
     "calls[1].hold[1]", "output [0, 1] is held twice"),
    (_step(calls=[{"run": "a|0|0|0", "gap_us": 3}]), "real_host_us",
     "required with gap_us"),  # gaps with no host step to fit them to
    (_step(tail_gap_us=3), "real_host_us", "required with gap_us"),
    (_step(real_host_us=7e8), "real_host_us", "from 0 to 600000000"),  # a 12-minute wait
    (_step(real_host_us=-1), "real_host_us", "from 0 to"),
    (_step(real_host_us=10, real_host_from="guessed"), "real_host_from",
     "must be one of unprofiled, profiled, not 'guessed'"),
    (_step(real_host_us=10, tail_gap_us=-2), "tail_gap_us", "finite number"),
    (_step(real_host_us=10, calls=[{"run": "a|0|0|0", "gap_us": "long"}]), "calls[0].gap_us",
     "finite number"),
    ([1, 2], "(top level)", "JSON object"),
])
def test_hostile_step_files_are_refused_naming_file_and_entry(tmp_path, data, where, words):
    path = tmp_path / "bad.step.json"
    path.write_text(json.dumps(data))
    with pytest.raises(StepFileError) as caught:
        read_step_file(path)
    text = str(caught.value)
    assert f"{path}: {where}: " in text and words in text, text
    assert "invalid step file" in text


@pytest.mark.parametrize("value", ["\x1b[2J" + "A" * 100_000, [[[[0]]]] * 20_000,
                                   {"x" * 50_000: 1}])
def test_hostile_values_are_shown_short_in_step_file_problems(tmp_path, value):
    """A value that is not an index is named in a snippet, not echoed whole (a 256 MB file
    could fill the terminal) and never with the escapes that a terminal acts on."""
    data = _step(externals=1, calls=[{"run": "a|0|0|0", "hold": [[[0], value]],
                                      "ext": [[[0], value]]},
                                     {"run": "a|0|0|0", "in": [[[0], value, [0]]]}])
    path = tmp_path / "bad.step.json"
    path.write_text(json.dumps(data))
    with pytest.raises(StepFileError) as caught:
        read_step_file(path)
    text = str(caught.value)
    assert "calls[0].hold[0]: until " in text and "calls[0].ext[0]: external " in text
    assert "calls[1].in[0]: producer " in text
    assert len(text) < 2000 and "\x1b" not in text, len(text)


def test_unreadable_step_files_are_refused(tmp_path, monkeypatch):
    bad_json = tmp_path / "a.step.json"
    bad_json.write_text('{"format": NaN}')
    with pytest.raises(StepFileError, match="not valid JSON"):
        read_step_file(bad_json)
    with pytest.raises(StepFileError, match="not a regular file"):
        read_step_file(tmp_path)
    fifo = tmp_path / "fifo.step.json"
    os.mkfifo(fifo)
    with pytest.raises(StepFileError, match="not a regular file"):
        read_step_file(fifo)  # never blocks waiting for a writer
    monkeypatch.setattr("param_compute.spec.step_file.MAX_STEP_BYTES", 10)
    write_step_file(tmp_path / "big.step.json", {"calls": []})
    with pytest.raises(StepFileError, match="byte limit"):
        read_step_file(tmp_path / "big.step.json")
    assert validate_step(_step()) == []


# -- the dataflow a capture records ----------------------------------------------------------
def test_live_capture_records_which_call_feeds_which_input(tmp_path):
    x, w1, w2 = torch.randn(4, 8), torch.randn(8, 16), torch.randn(16, 3)
    data = _capture(lambda: _mlp(x, w1, w2), tmp_path / "mlp.json")
    runs = [call["run"].split("|")[0] for call in data["calls"]]
    assert runs == ["aten::mm", "aten::relu", "aten::mm", "aten::_softmax"]
    first, relu, second, softmax = data["calls"]
    assert first["ext"] == [[[0], 0], [[1], 1]] and "in" not in first
    assert relu["in"] == [[[0], 0, [0]]]
    assert second["in"] == [[[0], 1, [0]]] and second["ext"] == [[[1], 2]]
    assert softmax["in"] == [[[0], 2, [0]]]
    assert data["externals"] == 3
    spec = json.loads((tmp_path / "mlp.json").read_text())
    op, config, build, index = first["run"].split("|")
    assert spec[op]["config"][int(config)]["input"][int(index)]["args"][1]["shape"] == [8, 16]


def test_execution_trace_capture_records_the_dataflow(tmp_path):
    from torch.profiler import ExecutionTraceObserver

    from param_compute.capture.trace.execution_trace import capture_execution_trace

    x, w1, w2 = torch.randn(4, 8), torch.randn(8, 16), torch.randn(16, 3)
    trace = tmp_path / "et.json"
    observer = ExecutionTraceObserver()
    observer.register_callback(str(trace))
    observer.start()
    try:
        _mlp(x, w1, w2)
    finally:
        observer.stop()
        observer.unregister_callback()
    capture_execution_trace(trace).write(tmp_path / "et_spec.json")
    data = read_step_file(tmp_path / "et_spec.step.json")
    by_op = {call["run"].split("|")[0]: call for call in data["calls"]}
    assert by_op["aten::relu"]["in"][0][0] == [0]
    producer = data["calls"][by_op["aten::relu"]["in"][0][1]]
    assert producer["run"].startswith("aten::mm")
    assert data["calls"].index(by_op["aten::_softmax"]) == len(data["calls"]) - 1
    assert by_op["aten::_softmax"]["in"]


# -- the replay ------------------------------------------------------------------------------
def _replay(spec_path: Path, **options):
    from param_compute.runtime.options import RunOptions
    from param_compute.runtime.step_replay import StepReplay
    from param_compute.runtime.step_run import planned_runs
    from param_compute.runtime.toolchain import Toolchain

    toolchain = Toolchain.start()
    spec = toolchain.load(spec_path)
    options = RunOptions(**options)
    step = read_step_file(step_path(spec_path))
    runs = planned_runs(step, spec, toolchain.registries.config_iterators, "cpu", "test")
    return StepReplay(step, runs, spec, toolchain.context(spec, options))


def _measure(replay, **options):
    """(the step's measurement, the replay's details), as the executor measures a step."""
    from param_compute.measure.measurer import Measurer
    from param_compute.runtime.options import RunOptions
    from param_compute.runtime.step_run import measure_step

    return measure_step(replay, Measurer(RunOptions(**options).measuring(), replay.device))


def _time_step(replay) -> float:
    """One whole step timed by the one Measurer on the replay's device (ms)."""
    from param_compute.measure.measurer import Measurer
    from param_compute.measure.protocol import Protocol

    from param_compute.measure.devices import Device

    return Measurer(Protocol(warmup=0, iteration=1), Device("step", replay.clock),
                    num_threads=None).measure(replay.step_callable(), name="step").measure_ms[0]


def test_replayed_step_feeds_outputs_to_consumers(tmp_path):
    """With the step's external tensors set to the real inputs, the replayed step ends with the
    real output: every intermediate went from its producer to its consumer."""
    torch.manual_seed(1)
    x, w1, w2 = torch.randn(4, 8), torch.randn(8, 16), torch.randn(16, 3)
    expected = _mlp(x, w1, w2)
    _capture(lambda: _mlp(x, w1, w2), tmp_path / "mlp.json")
    replay = _replay(tmp_path / "mlp.json")
    assert sorted(replay.externals) == [0, 1, 2]
    for number, real in enumerate((x, w1, w2)):
        replay.externals[number].copy_(real)
    replay.checked_pass()
    assert replay.mismatch_count == 0
    assert torch.allclose(replay.last_output, expected)
    assert all(value is None for value in replay.values)  # each released after its last use
    times = [0] * len(replay.calls)
    replay.run_step_timed(times)
    assert all(t > 0 for t in times) and _time_step(replay) > 0


def test_replay_calls_aten_overloads_through_their_cpp_entry(tmp_path):
    x, w = torch.randn(8, 8), torch.randn(8, 8)
    _capture(lambda: torch.relu(x @ w), tmp_path / "s.json")
    replay = _replay(tmp_path / "s.json")
    replay.checked_pass()
    funcs = [entry[1] for entry in replay._compiled()]
    assert funcs == [torch.ops.aten.mm.default._op, torch.ops.aten.relu.default._op]
    times = [0, 0]
    replay.run_step(times)
    assert all(t > 0 for t in times)


def test_a_fed_tensor_of_the_wrong_shape_is_replaced_and_counted(tmp_path):
    x, w = torch.randn(4, 8), torch.randn(8, 16)
    _capture(lambda: torch.relu(x @ w), tmp_path / "s.json")
    data = json.loads((tmp_path / "s.step.json").read_text())
    spec = json.loads((tmp_path / "s.json").read_text())
    relu = spec["aten::relu"]["config"][0]["input"][0]
    relu["args"][0]["shape"] = [4, 5]  # the consumer was captured with another shape
    (tmp_path / "s.json").write_text(json.dumps(spec))
    assert data["calls"][1]["in"]
    replay = _replay(tmp_path / "s.json")
    replay.checked_pass()
    assert replay.mismatch_count == 1
    assert "fed [4, 16] torch.float32, captured [4, 5]" in replay.mismatches[0]
    assert replay.last_output.shape == (4, 5)  # ran on a generated tensor of its own spec


def test_run_benchmark_replay_step_writes_a_step_record(tmp_path):
    x, w1, w2 = torch.randn(4, 8), torch.randn(8, 16), torch.randn(16, 3)
    _capture(lambda: _mlp(x, w1, w2), tmp_path / "mlp.json")
    out = tmp_path / "res.json"
    result = run_cli("-c", tmp_path / "mlp.json", "--replay-step", "-w", "1", "-i", "3",
                     "--output", out)
    assert result.returncode == 0, result.stderr
    said = result.stdout + result.stderr
    assert "step replay:" in said and "4 of 4 calls" in said
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    steps = [line for line in lines if line.get("kind") == "step"]
    assert len(steps) == 1 and lines[-1].get("finish_time")
    [step] = steps  # a run record like any other, measured by the run's protocol
    assert (step["op_name"], step["id"], step["status"]) == ("step_replay", "0|0|0", "ok")
    stats = step["stats"]["step"]
    assert stats["n"] == 3 and len(step["metric"]["step"]["measure.time"]) == 3
    assert stats["median"] > 0 and stats["ci_low"] <= stats["median"] <= stats["ci_high"]
    details = step["step"]
    assert details["calls"] == 4 and details["fed_inputs"] == 3 and details["externals"] == 3
    assert details["call_timed_steps"] == 3  # one before each timed step
    records = {f"{line['op_name']}|{line['id']}": line for line in lines
               if line.get("kind") == "run"}
    assert set(details["configs"]) == set(records)  # every config has its in-step time
    assert all(entry["in_step_us"] > 0 for entry in details["configs"].values())
    ledger = run_cli("--json", out, module="param_compute.workload_totals")
    assert ledger.returncode == 0, ledger.stderr
    data = json.loads(ledger.stdout)
    assert data["in_step_ms"] == pytest.approx(stats["median"])
    assert {"in_step_ms", "isolated_ms", "original_ms", "covered_fraction", "real_step_ms",
            "ops"} <= set(data)
    assert {row["op"] for row in data["ops"]} == {"aten::mm", "aten::relu", "aten::_softmax"}


def test_replay_step_refuses_a_missing_or_foreign_step_file(tmp_path):
    x = torch.randn(4, 4)
    _capture(lambda: torch.relu(x), tmp_path / "a.json")
    out = tmp_path / "res.json"
    missing = run_cli("-c", tmp_path / "a.json", "--step", tmp_path / "none.step.json",
                      "--output", out)
    assert missing.returncode == 2 and "no step file" in missing.stderr
    foreign = tmp_path / "foreign.step.json"
    foreign.write_text(json.dumps(_step(calls=[{"run": "aten::mm|0|0|7"}], externals=0)))
    bad = run_cli("-c", tmp_path / "a.json", "--step", foreign, "--output", out)
    assert bad.returncode == 2
    assert f"{foreign}: calls[0].run: 'aten::mm|0|0|7' is no run of the spec" in bad.stderr
    assert not out.exists()


# -- the ledger ------------------------------------------------------------------------------
def _record(op, run_id, median, count, original=None, status="ok"):
    record = {"op_name": op, "id": run_id, "status": status, "count": count,
              "stats": {"forward": {"median": median}} if median is not None else {}}
    if original is not None:
        record["original_us"] = {"cpu": original, "device": None}
    return record


def test_ledger_sets_original_in_step_and_isolated_side_by_side():
    records = [_record("aten::mm", "0|0|0", 1.0, 4, original=1000.0),  # 4 ms isolated
               _record("aten::mm", "0|0|1", 0.5, 2, original=500.0),   # 1 ms isolated
               _record("aten::add", "0|0|0", 0.1, 10, original=200.0),
               _record("aten::view", "0|0|0", 0.001, 100, original=30.0),
               _record("aten::gather", "0|0|0", 0.2, 5, original=800.0),
               {"run_options": {}}]  # not a record: ignored
    step = {"step_replay": {
        "stats": {"median": 9.0}, "real_step_us": 10000.0, "calls": 121,
        "configs": {"aten::mm|0|0|0": {"in_step_us": 1000.0, "calls": 4},
                    "aten::mm|0|0|1": {"in_step_us": 500.0, "calls": 2},
                    "aten::add|0|0|0": {"in_step_us": 200.0, "calls": 10},
                    "aten::view|0|0|0": {"in_step_us": 1.0, "calls": 100},
                    "aten::gather|0|0|0": {"in_step_us": 200.0, "calls": 5}},
        "original": {"total_us": {"cpu": 12000.0}, "captured_us": {"cpu": 10000.0},
                     "not_captured": [{"op": "aten::_embedding_bag", "calls": 2,
                                       "original_us": {"cpu": 2000.0, "device": 0.0}}],
                     "how": {"file": "kineto.json"}}}}
    ledger = build_ledger(records[:-1], upgraded(step), {"device": "cpu"})
    assert ledger["in_step_ms"] == 9.0 and ledger["real_step_ms"] == 10.0
    assert ledger["isolated_ms"] == pytest.approx(4 + 1 + 1 + 0.1 + 1)
    assert ledger["original_ms"] == 12.0 and ledger["covered_fraction"] == pytest.approx(10 / 12)
    rows = {row["op"]: row for row in ledger["ops"]}
    assert rows["aten::mm"]["original_ms"] == pytest.approx(5.0)
    assert rows["aten::mm"]["in_step_ms"] == pytest.approx(5.0)
    assert rows["aten::mm"]["reason"] == ""  # all three agree
    assert rows["aten::add"]["isolated_over_in_step"] == pytest.approx(0.5)
    assert rows["aten::add"]["reason"] == "allocation"  # slower in the step, fresh output
    assert rows["aten::view"]["reason"] == "profiler"  # the profiled original reads 30x
    assert rows["aten::gather"]["reason"] == "data"
    assert rows["aten::_embedding_bag"]["reason"] == "missing"
    assert rows["aten::_embedding_bag"]["original_ms"] == 2.0
    text = format_ledger(ledger)
    assert "aten::_embedding_bag x2 (2.000 ms)" in text and "83.3%" in text
    assert "Fidelity ledger" in ledger_section(ledger)


def test_ledger_without_a_step_replay_still_gives_isolated_and_original():
    ledger = build_ledger([_record("aten::mm", "0|0|0", 2.0, 3, original=1000.0),
                           _record("aten::mm", "0|0|1", None, 1, status="error")])
    assert ledger["in_step_ms"] is None and ledger["isolated_ms"] == 6.0
    row = ledger["ops"][0]
    assert row["failed"] == 1 and row["calls"] == 4 and row["original_ms"] == 3.0
    assert row["isolated_over_original"] == 2.0 and row["reason"] == "cache"


# -- the profiler's per-call cost ------------------------------------------------------------
def test_profiler_cost_is_calibrated_from_trivial_leaf_calls():
    events = [{"cat": "cpu_op", "name": "aten::view", "ts": 1000 + 100 * i, "dur": 21.0,
               "pid": 1, "tid": 1} for i in range(30)]
    outer = {"cat": "cpu_op", "name": "aten::mm", "ts": 0, "dur": 200.0, "pid": 1, "tid": 1}
    inner = [{"cat": "cpu_op", "name": "aten::empty", "ts": 10 + 50 * i, "dur": 20.0,
              "pid": 1, "tid": 1} for i in range(3)]
    other_thread = {"cat": "cpu_op", "name": "aten::add", "ts": 5, "dur": 50.0, "pid": 1,
                    "tid": 2}
    everything = events + [outer] + inner + [other_thread]
    counts = nested_counts(everything)
    assert counts[id(outer)] == 3 and counts[id(other_thread)] == 0
    cost = calibrate(everything, real_us=1.0)
    assert cost.per_call_us == pytest.approx(20.0)
    assert cost.corrected(outer) == pytest.approx(200 - 20 * 4)
    assert cost.corrected(events[0]) == pytest.approx(1.0)  # never below the real cost
    assert "30 trivial leaf calls" in cost.to_json()["calibrated_from"]
    assert calibrate(everything[25:], real_us=1.0) is None  # 5 trivial calls: too few


def test_html_report_opens_with_the_ledger(tmp_path):
    x, w = torch.randn(4, 8), torch.randn(8, 16)
    _capture(lambda: torch.relu(x @ w), tmp_path / "s.json")
    out = tmp_path / "res.json"
    assert run_cli("-c", tmp_path / "s.json", "--replay-step", "--output", out).returncode == 0
    html = tmp_path / "report.html"
    report = run_cli(out, "-o", html, module="param_compute.report")
    assert report.returncode == 0, report.stderr
    text = html.read_text()
    # the step first, then where its time goes (in-step beside isolated), then the configs
    order = [text.index(h) for h in ("Step totals", "Where the time goes", "Largest configs",
                                     "Configs, largest share of the step first")]
    assert order == sorted(order) and "Sweeps" not in text
    where = text[order[1]:order[2]]
    assert "aten::relu" in where and "in-step ms" in where
    assert "in-step replay (step replayed in order)" in text[order[0]:order[1]]


def test_live_originals_time_each_op_in_place_and_the_step_unprofiled(tmp_path):
    from param_compute.capture.live.timing import CallTimer, time_ops_in_place, time_step
    from param_compute.cli.capture import capture_run

    x, w = torch.randn(32, 32), torch.randn(32, 32)

    def step():
        torch.relu(x @ w).sum()

    with CallTimer() as timer:
        step()
    assert [str(func) for func, _ in timer.resolve()] == ["aten.mm.default",
                                                          "aten.relu.default",
                                                          "aten.sum.default"]
    times = time_ops_in_place(step, steps=2, passes=3)
    assert {name: len(v) for name, v in times.items()} == {
        "aten.mm.default": 2, "aten.relu.default": 2, "aten.sum.default": 2}
    assert all(t > 0 for v in times.values() for t in v)
    assert len(time_step(step, 4)) == 4
    workload = capture_run(step, warmup=1, steps=2, repeats=3)
    path, report = workload.write(tmp_path / "s.json")
    spec = json.loads(path.read_text())
    assert spec["aten::mm"]["config"][0]["input"][0]["count"] == 2
    assert spec["aten::mm"]["config"][0]["input"][0]["original_us"]["cpu"] > 0
    data = read_step_file(step_path(path))
    assert data["real_step_us"] > 0 and len(data["calls"]) == 6
    assert all(call["original_us"] > 0 for call in data["calls"])
    summary = json.loads(report.read_text())["original_time"]
    assert summary["real_step_us"] == pytest.approx(data["real_step_us"], rel=1e-3)


@pytest.mark.parametrize("line", [
    {"step_replay": {"stats": "fast", "configs": [1], "original": 3, "real_step_us": "x"}},
    {"step_replay": {"stats": {"median": float("nan")}, "configs": {"aten::mm|0|0|0": {
        "in_step_us": "1", "calls": -2}}, "original": {"total_us": [], "not_captured": [
            "x", {"op": 1, "original_us": {"cpu": "2"}}]}}},
    {"step_replay": {"configs": {"aten::mm|0|0|0": {"in_step_us": 500.0, "calls": -2}}}},
])
def test_ledger_reads_a_damaged_step_line_without_failing(line):
    ledger = build_ledger([_record("aten::mm", "0|0|0", 1.0, 2, original=100.0)],
                          upgraded(line))
    assert ledger["in_step_ms"] is None and ledger["isolated_ms"] == 2.0
    assert ledger["ops"][0]["in_step_ms"] in (None, 1.0)  # a bad call count: the record's
    format_ledger(ledger)


_HUGE = 1e308  # finite, but its sums overflow to infinity (invalid in --json's output)


@pytest.mark.parametrize("config, step", [
    ({"in_step_us": 1000.0, "calls": 2, "faults": _HUGE, "original_faults": _HUGE}, {}),
    ({"in_step_us": 1000.0, "calls": 2, "faults": -5e6, "original_faults": -1}, {}),
    ({"in_step_us": -1e308, "calls": 10**30}, {}),
    ({"in_step_us": _HUGE, "calls": 2}, {"real_step_us": 1e-300, "stats": {"median": _HUGE}}),
    ({"in_step_us": 1000.0, "calls": 2}, {"calls": float("inf"), "iterations": -1,
                                          "error": ["x"] * 1000}),
    ({"in_step_us": 1000.0, "calls": 2}, {"original": {"total_us": {"cpu": _HUGE}, "not_captured": [
        {"op": "\x1b[2J\nforged line", "calls": "many", "original_us": {"cpu": _HUGE}}]}}),
])
def test_ledger_takes_no_hostile_number_from_a_results_file(tmp_path, config, step):
    """Negative, huge or non-finite times and counts are no measurement: left out (``-``),
    never summed to infinity (``--json`` wrote ``Infinity``, which is not JSON), printed
    as a 300-digit number, or printed with the escapes a terminal acts on."""
    records = [_record("aten::mm", "0|0|0", 1.0, 2, original=100.0),
               _record("aten::relu", "0|0|0", _HUGE, 2, original=-1e3)]
    line = {"step_replay": {"stats": {"median": 2.0}, **step,
                            "configs": {"aten::mm|0|0|0": config, "aten::relu|0|0|0": config}}}
    ledger = build_ledger(records, upgraded(line), {"device": "cpu"})
    text = json.dumps(ledger, allow_nan=False)  # no inf or nan anywhere
    shown = format_ledger(ledger)
    assert "inf" not in shown and "nan" not in shown and "\x1b" not in shown, shown
    assert "forged line" not in shown or "\\nforged line" in shown
    assert max(len(row) for row in shown.splitlines()) < 200, shown
    assert all(v is None or 0 <= v < 1e40 for row in ledger["ops"]
               for v in (row["in_step_faults"], row["original_faults"], row["original_ms"],
                         row["in_step_ms"], row["isolated_ms"])), text
    results = tmp_path / "r.json"  # the same through the command line
    results.write_text("\n".join(json.dumps(x) for x in [
        {"run_options": {"device": "cpu"}, "sys_info": {}, "start_time": "x"},
        *[dict(r, metric={"forward": {"measure.time": [1.0]}}, config={}) for r in records],
        line]) + "\n")
    for args in ([results], ["--json", results]):
        done = run_cli(*args, module="param_compute.workload_totals")
        assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
        assert "\x1b" not in done.stdout and "Infinity" not in done.stdout
    assert max(len(row) for row in run_cli(results, module="param_compute.workload_totals")
               .stdout.splitlines()) < 200
    assert json.loads(done.stdout, parse_constant=lambda name: pytest.fail(name))["ops"]


def test_dry_run_plans_the_step_without_replaying_it(tmp_path):
    x = torch.randn(4, 4)
    _capture(lambda: torch.relu(x).sum(), tmp_path / "a.json")
    out = tmp_path / "res.json"
    result = run_cli("-c", tmp_path / "a.json", "--replay-step", "--dry-run", "--output", out)
    assert result.returncode == 0, result.stderr
    assert "step replay: 2 calls planned (dry run)" in result.stdout + result.stderr
    planned = [json.loads(line) for line in out.read_text().splitlines()][1:-1]
    # the step is one more planned run, listed like the configs, nothing replayed
    assert [(r["op_name"], r["status"]) for r in planned][-1] == ("step_replay", "dry-run")
    assert planned[-1]["config"]["input"] == {"step_file": str(tmp_path / "a.step.json"),
                                              "calls": 2}


def test_device_clock_times_each_call_between_stamps(tmp_path):
    """On a device (CUDA) each call's in-step time is the clock's interval between the stamps
    around it, a launch cover queued before each (judged by the last call's host time):
    checked with a fake clock whose stamps are squares of their numbers (ms)."""
    x, w = torch.randn(4, 8), torch.randn(8, 16)
    _capture(lambda: torch.relu(x @ w).sum(), tmp_path / "s.json")
    replay = _replay(tmp_path / "s.json")
    replay.checked_pass()

    class FakeClock:
        name = "fake_events"
        stamps = 0
        reserved = None
        barrier = None

        def reserve(self, count):
            self.reserved = count

        def stamp(self):
            self.stamps += 1
            return self.stamps * self.stamps  # intervals 3, 5, 7 ... ms

        def synchronize(self):
            return None

        @staticmethod
        def elapsed_ms(start, end):
            return float(end - start)

        covers = []

        def cover(self, last_host_us):
            self.covers.append(last_host_us)

        @staticmethod
        def host_elapsed_ms(start, end):
            return float(end - start) / 10

    replay.clock = FakeClock()
    times = [0] * len(replay.calls)
    replay.run_step_timed(times)
    assert replay.clock.reserved == 2 * len(replay.calls)
    assert times == [3e6, 7e6, 11e6]  # ns per call, in order: stamps 1-2, 3-4, 5-6
    assert replay.clock.covers == [None, 300.0, 700.0]  # the last call's host µs
    assert _time_step(replay) == float(8 * 8 - 7 * 7)  # the step: stamps 7 and 8


# -- page faults: first touches of fresh memory, counted in the original and in the replay ------
#: Larger than glibc's largest dynamic mmap threshold (32 MiB): always fresh pages, never reused.
FRESH_FLOATS = 12 * 2**20  # 48 MiB


LIVE_FAULTS = """
import json, os, sys
import torch
from param_compute.capture.live.timing import CallTimer, time_ops_in_place
from param_compute.spec.step_file import read_step_file, step_path
from param_compute.cli.capture import capture_run

FRESH_FLOATS, out = int(sys.argv[1]), sys.argv[2]
x = torch.randn(64, 64)

def step():
    torch.ones(FRESH_FLOATS).sum()  # fresh pages of output, first touched here
    torch.relu(x)

with CallTimer(count_faults=True) as timer:
    step()
faults = {}
times = time_ops_in_place(step, steps=1, passes=3, faults=faults)
path, _ = capture_run(step, warmup=1, steps=1, repeats=2).write(out)
calls = read_step_file(step_path(path))["calls"]
print(json.dumps({"order": [str(func) for func, _ in timer.resolve()], "timer": timer.faults,
                  "ops": sorted(times), "faults": faults,
                  "step": {call["run"].split("|")[0]: call["faults"] for call in calls}}))
"""


def test_live_timing_counts_each_calls_page_faults(tmp_path):
    # in a process of its own: which memory the allocator recycles is the process's history
    done = subprocess.run([sys.executable, "-c", LIVE_FAULTS, str(FRESH_FLOATS),
                           str(tmp_path / "s.json")], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=300)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.splitlines()[-1])
    assert seen["order"] == ["aten.ones.default", "aten.sum.default", "aten.relu.default"]
    pages = FRESH_FLOATS * 4 // os.sysconf("SC_PAGE_SIZE")
    assert seen["timer"][0] >= 0.9 * pages, seen["timer"]
    assert seen["timer"][2] < 0.05 * pages, seen["timer"]  # 16 KiB of output
    assert sorted(seen["faults"]) == seen["ops"]
    assert seen["faults"]["aten.ones.default"][0] >= 0.9 * pages
    assert seen["faults"]["aten.relu.default"][0] < 0.05 * pages
    assert seen["step"]["aten::ones"] >= 0.9 * pages
    assert seen["step"]["aten::relu"] < 0.05 * pages


FRESH_STEP = """
import torch

x = torch.randn(64, 64)


def step():
    torch.relu(torch.ones({floats}))
    torch.relu(x)
"""


def test_step_replay_counts_page_faults_beside_the_originals(tmp_path):
    (tmp_path / "fresh_step.py").write_text(FRESH_STEP.format(floats=FRESH_FLOATS))
    path = tmp_path / "s.json"
    # the capture in a process of its own too: in a long-lived test worker the allocator's
    # history decides which memory a call gets (CI once saw the original's count short)
    done = run_cli("--run", "fresh_step:step", "-o", path, module="param_compute.capture",
                   cwd=tmp_path, forked=True)
    assert done.returncode == 0, done.stderr
    out = tmp_path / "r.json"
    # a process of its own: which memory the allocator recycles is the process's history
    done = run_cli("-c", path, "--replay-step", "-w", "1", "-i", "2", "--max-memory", "none",
                   "--only", "aten::relu", "--output", out, forked=True)
    assert done.returncode == 0, done.stderr
    [record] = [json.loads(line)["step"] for line in out.read_text().splitlines()
                if json.loads(line).get("kind") == "step"]
    pages = FRESH_FLOATS * 4 // os.sysconf("SC_PAGE_SIZE")
    assert "median of 3 untimed steps" in record["faults_counted"]
    configs = record["configs"]
    ones = next(value for key, value in configs.items() if key.startswith("aten::ones|"))
    assert ones["faults"] >= 0.9 * pages and ones["original_faults"] >= 0.9 * pages
    small = [value for key, value in configs.items() if key.startswith("aten::relu|")]
    assert sorted(v["faults"] >= 0.9 * pages for v in small) == [False, True]


def test_ledger_names_page_faults_as_the_cause_of_a_gap():
    records = [_record("aten::native_batch_norm_backward", "0|0|0", 1.0, 1, original=3600.0),
               _record("aten::gelu", "0|0|0", 1.0, 1, original=3000.0),
               _record("aten::mm", "0|0|0", 1.0, 2, original=1000.0),
               _record("aten::mm", "0|0|1", 1.0, 1, original=1000.0)]
    step = {"step_replay": {"stats": {"median": 9.0}, "configs": {
        # 1568 fresh pages in the original, none in the replay: 3.6 ms against 1.3
        "aten::native_batch_norm_backward|0|0|0": {"in_step_us": 1300.0, "calls": 1,
                                                   "faults": 0, "original_faults": 1568},
        # as slow, but the same faults on both sides: not the allocator
        "aten::gelu|0|0|0": {"in_step_us": 1000.0, "calls": 1, "faults": 1568,
                             "original_faults": 1568},
        "aten::mm|0|0|0": {"in_step_us": 1000.0, "calls": 2, "faults": 10,
                           "original_faults": 12},
        "aten::mm|0|0|1": {"in_step_us": 1000.0, "calls": 1, "faults": 3}},
        "original": {"how": {"file": "live timing (unprofiled)"}}}}
    ledger = build_ledger(records, upgraded(step), {"device": "cpu"})
    rows = {row["op"]: row for row in ledger["ops"]}
    bn = rows["aten::native_batch_norm_backward"]
    assert (bn["original_faults"], bn["in_step_faults"]) == (1568, 0)
    assert bn["reason"] == "allocation"
    assert rows["aten::gelu"]["reason"] == "cache"
    # one config of mm has no original count: the op's original sum is unknown, not partial
    assert rows["aten::mm"]["in_step_faults"] == 23 and rows["aten::mm"]["original_faults"] is None
    text = format_ledger(ledger)
    assert "faults orig/step" in text and "1568/0" in text and "-/23" in text
    assert (ledger["in_step_faults"], ledger["original_faults"]) == (1568 + 23, 1568 + 1568)
    assert "first touches a step, orig / in-step" in text and "3136/1591" in text
    assert "minor page faults per step" in text
    assert "page faults, original / in-step" in ledger_section(ledger)
    # the reverse: the replay faults where the original reused memory, and is slower
    step["step_replay"]["configs"]["aten::gelu|0|0|0"].update(in_step_us=6000.0, faults=4000,
                                                              original_faults=0)
    rows = {row["op"]: row for row in build_ledger(records, upgraded(step))["ops"]}
    assert rows["aten::gelu"]["reason"] == "allocation"
    # originals timed in place: a small call reading long is the timer's; a long one is not
    live = [_record("aten::gelu", "0|0|0", 0.01, 8, original=19.0),
            _record("aten::mm", "0|0|0", 1.0, 2, original=2000.0)]
    timed = {"step_replay": {"stats": {"median": 5.0}, "configs": {
        "aten::gelu|0|0|0": {"in_step_us": 11.0, "calls": 8},
        "aten::mm|0|0|0": {"in_step_us": 1000.0, "calls": 2}},
        "original": {"how": {"file": "live timing (unprofiled)"}}}}
    rows = {row["op"]: row for row in build_ledger(live, upgraded(timed))["ops"]}
    assert rows["aten::gelu"]["reason"] == "profiler"
    assert rows["aten::mm"]["reason"] == "cache"
    # slower in the step than isolated: allocation only where the step touches fresh pages
    iso = [_record("aten::relu", "0|0|0", 1.0, 1), _record("aten::gelu", "0|0|0", 1.0, 1)]
    gap = {"step_replay": {"stats": {"median": 5.0}, "configs": {
        "aten::relu|0|0|0": {"in_step_us": 3000.0, "calls": 1, "faults": 0},
        "aten::gelu|0|0|0": {"in_step_us": 3000.0, "calls": 1, "faults": 1568}}}}
    rows = {row["op"]: row for row in build_ledger(iso, upgraded(gap))["ops"]}
    assert (rows["aten::relu"]["reason"], rows["aten::gelu"]["reason"]) == ("cache",
                                                                            "allocation")
    # the HTML report's table: in-step / original and the faults of both sides
    from param_compute.analysis.report_workload import _per_op
    from param_compute.results.totals import WorkloadTotals

    html = _per_op(WorkloadTotals(), build_ledger(records, upgraded(step), {"device": "cpu"}))
    assert "in-step / original" in html and "page faults per step, original / in-step" in html
    assert ">1568/0<" in html
    # without counts the table has no faults column
    plain = {"step_replay": {"stats": {"median": 1.0}, "configs": {
        "aten::mm|0|0|0": {"in_step_us": 1000.0, "calls": 2}}}}
    assert "faults" not in format_ledger(build_ledger(records[2:3], upgraded(plain)))


# -- lifetimes: outputs kept as long as the original kept them ----------------------------------
def test_recorder_holds_outputs_released_after_their_last_reader():
    recorder = StepRecorder()
    for index in range(4):  # call 1 reads call 0's output; nothing reads 2's or 3's
        inputs = [([0], ("T", 0), ("L", 0))] if index == 1 else []
        recorder.call(("aten::x", "s", "k"), inputs, [([0], ("T", 10 + index),
                                                        ("L", 10 + index))])
        if index == 2:
            recorder.released(0, [0])  # call 0's output outlived its reader (call 1)
    recorder.released(2, [0])  # after call 3: later than its own call
    recorder.outlives(3, [0])  # alive when the capture ended
    recorder.outlives(2, [0])  # already released: stays released
    body = recorder.to_json({("aten::x", "s", "k"): "aten::x|0|0|0"}, "s.json", "t")
    assert [call.get("hold") for call in body["calls"]] == [[[[0], 2]], None, [[[0], 3]],
                                                            [[[0], -1]]]


def test_live_capture_keeps_gradients_to_the_next_step_and_the_replay_does_too(tmp_path):
    from param_compute.cli.capture import capture_run

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                                torch.nn.Linear(32, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(8, 16)

    def step():
        optimizer.zero_grad(set_to_none=True)
        model(x).sum().backward()
        optimizer.step()

    path, _ = capture_run(step, warmup=1, steps=1, repeats=2).write(tmp_path / "s.json")
    calls = read_step_file(step_path(path))["calls"]
    past = [(index, call["run"]) for index, call in enumerate(calls)
            for _, until in call.get("hold", []) if until == -1]
    # the four gradients (two weights, two biases) live on in .grad until the next zero_grad
    assert len(past) >= 4, past
    replay = _replay(path)
    assert len(replay.carried) == len(past) and replay.held >= len(past)
    replay.checked_pass()
    kept = [replay.values[slot] for slot in replay.carried]
    assert all(isinstance(value, torch.Tensor) for value in kept)
    shapes = sorted(tuple(value.shape) for value in kept)
    for shape in [(4,), (4, 32), (32,), (32, 16)]:
        assert shape in shapes, shapes
    import weakref

    # an in-place op's output is its input (a parameter, alive anyway): the others only
    producer = {slot: call.run_key.split("|")[0] for call in replay.calls
                for _, slot in call.outs}
    refs = [weakref.ref(replay.values[slot]) for slot in replay.carried
            if not producer[slot].endswith("_")]
    assert len(refs) >= 4
    del kept
    first = replay.calls[0]
    seen = []

    def first_call(*args, original=first.func, **kwargs):
        seen.append([ref() is None for ref in refs])
        return original(*args, **kwargs)

    first.func = first_call
    replay.run_step()  # the survivors of the last step are released as the next one starts
    assert seen == [[True] * len(refs)]
    assert all(isinstance(replay.values[slot], torch.Tensor) for slot in replay.carried)
