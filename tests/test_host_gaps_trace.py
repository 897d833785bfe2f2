"""Host gaps from traces: ``capture --from-et ET --kineto KINETO`` writes each captured call's
host gap, the tail and the step's host time from Kineto's timestamps in the ProfilerStep#N
window, less the profiler's calibrated cost; a hostile trace gives sane bounded gaps or none,
with the reason in the capture report."""

from __future__ import annotations

import copy
import json
import math
import tempfile
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from conftest import run_cli
from param_compute.capture import capture_execution_trace
from param_compute.capture.trace import profiler_cost
from param_compute.spec.step_file import (MAX_HOST_STEP_US, read_step_file, step_path,
                                             validate_step, write_step_file)
from param_compute.cli.capture import main as capture_main

RELU = str(torch.ops.aten.relu.default._schema)
SIGMOID = str(torch.ops.aten.sigmoid.default._schema)
ADD = str(torch.ops.aten.add.Tensor._schema)
RECORD_STREAM = str(torch.ops.aten.record_stream.default._schema)
STEP_NODE = 2


def _t(tensor_id: int):
    return [tensor_id, tensor_id, 0, 8, 4, "cpu"]


def _node(node_id, name, schema, types, values, shapes, outputs=()):
    return {"id": node_id, "name": name, "ctrl_deps": STEP_NODE,
            "inputs": {"values": values, "shapes": shapes, "types": types},
            "outputs": {"values": [_t(o) for o in outputs], "shapes": [[8] for _ in outputs],
                        "types": ["Tensor(float)" for _ in outputs]},
            "attrs": [{"name": "op_schema", "type": "string", "value": schema}]}


def et_trace():
    """One ProfilerStep#1 window: relu -> sigmoid -> record_stream (not captured) -> add."""
    root = {"id": 1, "name": "[pytorch|profiler|execution_trace|process]", "ctrl_deps": 1,
            "inputs": {"values": [], "shapes": [], "types": []}, "attrs": []}
    step = {"id": STEP_NODE, "name": "ProfilerStep#1", "ctrl_deps": 1,
            "inputs": {"values": [], "shapes": [], "types": []}, "attrs": []}
    return {"schema": "1.1.1-chakra.0.0.4", "pid": 7, "nodes": [
        root, step,
        _node(3, "aten::relu", RELU, ["Tensor(float)"], [_t(10)], [[8]], outputs=[11]),
        _node(4, "aten::sigmoid", SIGMOID, ["Tensor(float)"], [_t(11)], [[8]], outputs=[12]),
        _node(5, "aten::record_stream", RECORD_STREAM, ["Tensor(float)", "Stream"],
              [_t(12), 7], [[8], []]),
        _node(6, "aten::add", ADD, ["Tensor(float)", "Tensor(float)", "Int"],
              [_t(12), _t(10), 1], [[8], [8], []], outputs=[13])]}


def _event(name, ts, dur, cat="cpu_op"):
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": 7, "tid": 7,
            "args": {}}


#: (op, start, duration) in the window [1000, 3000] µs: 100 µs before relu, 500 between relu
#: and sigmoid, 100 before record_stream (not captured, 50 µs), 100 before add, 200 after it.
WINDOW = (1000, 2000)
OPS = [("aten::relu", 1100, 100), ("aten::sigmoid", 1700, 300),
       ("aten::record_stream", 2100, 50), ("aten::add", 2250, 550)]


def kineto_trace(scale: float = 1.0, trivial: bool = False):
    """The Kineto trace of ``et_trace``'s step (times x ``scale``). ``trivial``: 20 views
    nested in sigmoid (12 µs each: enough to calibrate the profiler's cost) and two
    Kineto-only calls in the gap before sigmoid."""
    events = [_event("ProfilerStep#1", WINDOW[0] * scale, WINDOW[1] * scale,
                     cat="user_annotation")]
    events += [_event(name, ts * scale, dur * scale) for name, ts, dur in OPS]
    if trivial:
        events += [_event("aten::view", 1710 + 13 * i, 12) for i in range(20)]
        events += [_event("aten::empty", 1300, 5), _event("aten::empty", 1400, 5)]
    return {"schemaVersion": 1, "traceEvents": events}


def _step(tmp_path: Path, et, kineto, name: str = "s"):
    workload = capture_execution_trace(copy.deepcopy(et), source="et",
                                       kineto=copy.deepcopy(kineto) if kineto else None)
    spec, report = workload.write(tmp_path / f"{name}.json")
    return read_step_file(step_path(spec)), json.loads(report.read_text())


def _gaps(step):
    return [(call["run"].split("|")[0], call.get("gap_us")) for call in step["calls"]]


def test_gaps_tail_and_host_step_as_kineto_recorded_them(tmp_path):
    step, report = _step(tmp_path, et_trace(), kineto_trace())
    # record_stream is not captured: its gap (100) and its time (50) go to add's (100)
    assert _gaps(step) == [("aten::relu", 100.0), ("aten::sigmoid", 500.0),
                           ("aten::add", 250.0)]
    assert step["tail_gap_us"] == 200.0
    assert step["real_host_us"] == 2000.0  # too few trivial calls: the window as recorded
    assert step["real_host_from"] == "profiled"  # an upper bound: --host-gaps auto leaves it
    gaps = report["original_time"]["host_gaps"]
    assert gaps["written"] is True and gaps["real_host_us"] == 2000.0
    assert "as recorded (the profiler's cost per call could not be calibrated)" \
        in gaps["real_host"]
    assert gaps["calls_timed"] == 4 and gaps["calls_without_event"] == 0
    assert gaps["caveat"].startswith("an upper bound")
    assert validate_step(step) == []


def test_the_profilers_cost_is_taken_out_of_gaps_and_host_step(tmp_path, monkeypatch):
    # 20 views of 12 µs whose unprofiled cost is 2 µs: the profiler costs 10 µs per call
    monkeypatch.setattr(profiler_cost, "unprofiled_trivial_us", lambda calls=2000: 2.0)
    step, report = _step(tmp_path, et_trace(), kineto_trace(trivial=True))
    assert report["original_time"]["profiler_cost"]["per_call_us"] == 10.0
    # each gap less 10 µs for the next call's record and 10 per profiled call in it (the two
    # empties before sigmoid); record_stream's 50 µs less its own 10 go to add
    assert _gaps(step) == [("aten::relu", 90.0), ("aten::sigmoid", 500.0 - 3 * 10),
                           ("aten::add", 90.0 + 40.0 + 90.0)]
    assert step["tail_gap_us"] == 200.0
    # the window less 10 µs for each of the 26 profiled calls in it (4 ops, 20 views, 2 empty)
    assert step["real_host_us"] == 2000.0 - 26 * 10
    assert "less the profiler's 10.000 µs per call x 26 profiled CPU calls" in \
        report["original_time"]["host_gaps"]["real_host"]
    sigmoid = next(c for c in step["calls"] if c["run"].startswith("aten::sigmoid"))
    assert sigmoid["original_us"] == 300.0 - 21 * 10  # itself and its 20 views


def test_without_kineto_or_a_step_window_no_gaps_are_written(tmp_path):
    step, report = _step(tmp_path, et_trace(), None, "no_kineto")
    assert "real_host_us" not in step and "tail_gap_us" not in step
    assert all("gap_us" not in call for call in step["calls"])
    assert "original_time" not in report
    kineto = kineto_trace()
    kineto["traceEvents"] = kineto["traceEvents"][1:]  # no ProfilerStep#1 event
    step, report = _step(tmp_path, et_trace(), kineto, "no_window")
    assert "real_host_us" not in step and all("gap_us" not in c for c in step["calls"])
    assert report["original_time"]["host_gaps"] == {
        "written": False,
        "why": "the Kineto trace has no ProfilerStep#1 event: the step's host time is not known"}
    et = et_trace()
    et["nodes"][1]["name"] = "forward"  # no ProfilerStep window in the execution trace
    step, report = _step(tmp_path, et, kineto_trace(), "no_step")
    assert "real_host_us" not in step
    assert "has no ProfilerStep#N window" in report["original_time"]["host_gaps"]["why"]


def _with(kineto, name, ts=None, dur=None):
    for event in kineto["traceEvents"]:
        if event["name"] == name:
            if ts is not None:
                event["ts"] = ts
            if dur is not None:
                event["dur"] = dur
    return kineto


@pytest.mark.parametrize("window, why", [
    ((1000, 1e12), "not a host step (1 to 600000000 µs)"),  # a "step" of 11 days
    ((1e300, 2000), "is empty or its timestamps are not finite"),  # ts + dur == ts
    ((1.5e308, 1.5e308), "is empty or its timestamps are not finite"),  # ts + dur == inf
    ((1000, 0), "is empty or its timestamps are not finite")])
def test_a_window_that_is_not_a_host_step_gives_no_gaps(tmp_path, window, why):
    kineto = _with(kineto_trace(), "ProfilerStep#1", *window)
    step, report = _step(tmp_path, et_trace(), kineto, "w")
    assert why in report["original_time"]["host_gaps"]["why"]
    assert "real_host_us" not in step and all("gap_us" not in c for c in step["calls"])
    assert validate_step(step) == []


def test_overlapping_out_of_order_and_outsized_calls_give_bounded_gaps(tmp_path):
    kineto = kineto_trace()
    _with(kineto, "aten::sigmoid", ts=1150)  # starts inside relu: no gap of its own
    _with(kineto, "aten::add", ts=1050, dur=1e12)  # before both, and runs for 11 days
    step, _ = _step(tmp_path, et_trace(), kineto, "o")
    # sigmoid counts only its part after relu's end (1200 to 1450); record_stream's gap
    # since then and its time go to add, which has no gap of its own (it started before the
    # calls ahead of it) and, clipped to the window, leaves nothing to the tail
    assert _gaps(step) == [("aten::relu", 100.0), ("aten::sigmoid", 0.0),
                           ("aten::add", (2100 - 1450) + 50.0)]
    assert step["tail_gap_us"] == 0.0 and step["real_host_us"] == 2000.0
    assert validate_step(step) == []
    kineto = _with(kineto_trace(), "aten::relu", ts=-5e9)  # outside the window: not joined
    step, report = _step(tmp_path, et_trace(), kineto, "outside")
    assert _gaps(step) == [("aten::relu", None), ("aten::sigmoid", 700.0),
                           ("aten::add", 250.0)]
    assert report["original_time"]["host_gaps"]["calls_without_event"] == 1
    assert validate_step(step) == []


@pytest.mark.parametrize("field, value, message", [
    ("ts", float("nan"), "ts is"), ("dur", float("inf"), "dur is"),
    ("dur", -5, "dur is negative")])
def test_non_numbers_in_a_kineto_trace_are_refused_with_their_event(tmp_path, capsys, field,
                                                                    value, message):
    et, kineto = tmp_path / "et.json", tmp_path / "kineto.json"
    et.write_text(json.dumps(et_trace()))
    kineto.write_text(json.dumps(_with(kineto_trace(), "aten::sigmoid", **{field: value})))
    assert capture_main(["--from-et", str(et), "--kineto", str(kineto),
                         "-o", str(tmp_path / "s.json")]) == 2
    err = capsys.readouterr().err
    assert "aten::sigmoid" in err and message in err and "Traceback" not in err
    assert not (tmp_path / "s.step.json").exists()


_times = st.one_of(st.floats(-1e9, 1e9), st.sampled_from([0.0, 1e15, -1e15, 1e300, 1.5e308]))


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(window=st.tuples(_times, st.one_of(st.floats(0, 1e10), st.just(1.5e308))),
       ops=st.lists(st.tuples(_times, st.one_of(st.floats(0, 1e10), st.just(1e300))),
                    min_size=4, max_size=4))
@example(window=(1e15, 1.34375), ops=[(283768704.44318295, 1e300), (1.1754943508222875e-38,
                                                                   1e300), (0.0, 1e300),
                                      (1e15, 0.0)])  # rounded at 1e15: a tail past the window
def test_any_timestamps_give_a_valid_step_file(window, ops):
    kineto = _with(kineto_trace(), "ProfilerStep#1", *window)
    for (name, _, _), (ts, dur) in zip(OPS, ops):
        _with(kineto, name, ts=ts, dur=dur)
    workload = capture_execution_trace(et_trace(), source="et", kineto=kineto)
    with tempfile.TemporaryDirectory() as folder:  # written and read back: validated
        path = write_step_file(Path(folder) / "s.step.json",
                               workload.step.to_json(workload.run_keys(), "s.json", "et"))
        step = read_step_file(path)
    gaps = workload.kineto["host_gaps"]
    if "real_host_us" not in step:
        assert gaps["written"] is False and gaps["why"]
        return
    assert 1 <= step["real_host_us"] <= MAX_HOST_STEP_US
    spread = [c.get("gap_us", 0.0) for c in step["calls"]] + [step["tail_gap_us"]]
    assert all(math.isfinite(g) and g >= 0 for g in spread)
    assert sum(spread) <= window[1] + 0.01  # the gaps are disjoint parts of the window


def test_replay_keeps_a_traces_gaps_end_to_end(tmp_path):
    """Captured from trace files, the step replays with the original's host step: 30 ms
    (gaps 15 ms between relu and sigmoid, 6 ms after add) where three small ops take µs."""
    et, kineto = tmp_path / "et.json", tmp_path / "kineto.json"
    et.write_text(json.dumps(et_trace()))
    kineto.write_text(json.dumps(kineto_trace(scale=15.0)))
    spec = tmp_path / "s.json"
    assert capture_main(["--from-et", str(et), "--kineto", str(kineto), "-o", str(spec)]) == 0
    step = read_step_file(step_path(spec))
    assert step["real_host_us"] == 30000.0 and step["tail_gap_us"] == 3000.0
    out = tmp_path / "on.json"
    done = run_cli("-c", spec, "--replay-step", "--host-gaps", "on", "-w", "1", "-i", "3",
                   "--output", out)
    assert done.returncode == 0, done.stderr
    [record] = [json.loads(line) for line in out.read_text().splitlines()
                if json.loads(line).get("kind") == "step"]
    kept = record["step"]["host_gaps"]
    assert kept["kept"] is True and kept["real_host_us"] == 30000.0
    assert kept["captured_gaps_us"] == pytest.approx(1500 + 7500 + 3750 + 3000, abs=0.2)
    assert kept["added_us"] == pytest.approx(30000.0 - kept["replay_host_us"], abs=0.2)
    assert record["stats"]["step"]["median"] * 1e3 >= 0.9 * 30000.0


# --- real traces recorded by others (skipped where ../shared/traces is absent) --------------

def _shared_traces() -> Path:
    for folder in (Path(__file__).resolve().parents[1].parent / "shared" / "traces",
                   Path("/work/shared/traces")):
        if folder.is_dir():
            return folder
    pytest.skip("no shared traces beside this checkout")


def test_real_et_and_kineto_pairs_write_a_valid_step_file(tmp_path):
    folder = _shared_traces()
    pairs = [(et, folder / et.name.replace("_et.", "_kineto.")) for et in
             sorted(folder.glob("*_et.json*"))]
    pairs = [(et, kineto) for et, kineto in pairs if kineto.exists()]
    if not pairs:
        pytest.skip(f"no execution trace with its Kineto trace in {folder}")
    for et, kineto in pairs:
        workload = capture_execution_trace(et, kineto=kineto)
        spec, report = workload.write(tmp_path / f"{et.name.split('_et.')[0]}.json")
        step = read_step_file(step_path(spec))  # validated as it is read
        gaps = json.loads(report.read_text())["original_time"]["host_gaps"]
        if gaps["written"]:
            assert 0 < step["real_host_us"] <= MAX_HOST_STEP_US
        else:  # linear_et has no ProfilerStep window: no host step, so no gaps
            assert "real_host_us" not in step and "ProfilerStep" in gaps["why"]


def test_a_duration_past_any_real_run_leaves_the_call_without_a_time(tmp_path):
    kineto = _with(kineto_trace(), "aten::sigmoid", dur=1e300)
    step, report = _step(tmp_path, et_trace(), kineto, "huge")
    sigmoid = next(c for c in step["calls"] if c["run"].startswith("aten::sigmoid"))
    assert "original_us" not in sigmoid  # not 1e300 µs: the step file stays valid
    assert report["original_time"]["refused"] == \
        "1 calls and 0 kernels with a duration over 1e+15 µs: left without a time"
    # clipped to the window, sigmoid runs to its end: add has no gap, nothing is left after
    assert _gaps(step) == [("aten::relu", 100.0), ("aten::sigmoid", 500.0),
                           ("aten::add", 0.0)]
    assert step["tail_gap_us"] == 0.0
