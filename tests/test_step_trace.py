"""A picture of the step: the step record's timeline (one call-timed step kept call by call),
the replay beside its original as a Chrome/Perfetto trace (``totals --trace``), and the
report's timeline (two lanes of inline SVG); hostile step records and step files are a
FILE:LINE warning, never a traceback, and the report still renders."""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

import pytest
import torch

from conftest import run_cli
from test_report_readable import write_results
from test_step_replay import _capture, _mlp, _replay
from param_compute.analysis.step_timeline import PLOT, boxes
from param_compute.analysis.step_tracks import Call
from param_compute.runtime.step_timeline import MAX_CALLS, build_timeline, representative

TOTALS = "param_compute.workload_totals"
REPORT = "param_compute.report"
OPS = ["aten::mm", "aten::relu", "aten::add", "aten::_softmax", "aten::mul"]


# -- synthetic step files and records ------------------------------------------------------------
def _keys(n: int) -> List[str]:
    return [f"{OPS[i % len(OPS)]}|0|0|{i % 3}" for i in range(n)]


def _step_file(path: Path, n: int, original: bool = True, real_step_us: Optional[float] = None,
               keys: Optional[List[str]] = None) -> Path:
    keys = keys or _keys(n)
    calls = []
    for i, key in enumerate(keys):
        call: Dict[str, Any] = {"run": key}
        if original:
            call["original_us"] = 2.0 + i % 7
            call["gap_us"] = 0.5
        calls.append(call)
    data: Dict[str, Any] = {"format": "param_compute.step", "version": 1, "externals": 0,
                            "calls": calls}
    if original:
        data["real_host_us"] = sum(c["gap_us"] for c in calls)
        data["tail_gap_us"] = 1.0
    if real_step_us is not None:
        data["real_step_us"] = real_step_us
    path.write_text(json.dumps(data))
    return path


def _timeline(n: int, failed=()) -> Dict[str, Any]:
    """A timeline as the replay writes it: three call-timed steps on the host."""
    keys = _keys(n)
    passes = []
    for scale in (1.0, 1.2, 0.9):
        times = [0 if i in failed else int(1000 * scale * (1 + i % 4)) for i in range(n)]
        starts, cursor = [0] * n, 0
        for i in range(n):
            if i not in failed:
                starts[i] = cursor
                cursor += times[i] + 300
        passes.append((times, starts))
    return build_timeline(keys, [i in failed for i in range(n)], passes, "measured")


def _step_record(step_file: Path, n: int, timeline: Any = "default",
                 **changes) -> Dict[str, Any]:
    step = {"calls": n, "replayed_calls": n, "configs": {},
            "timeline": _timeline(n) if timeline == "default" else timeline}
    if timeline is None:
        del step["timeline"]
    record = {"kind": "step", "op_name": "step_replay", "id": "0|0|0", "status": "ok",
              "config": {"build": None, "input": {"step_file": str(step_file), "calls": n}},
              "metric": {"step": {"measure.time": [1.0, 1.1, 0.9]}},
              "stats": {"step": {"n": 3, "median": 1.0, "p10": 0.9, "p90": 1.1}},
              "step": step}
    record.update(changes)
    return record


def _results(tmp_path: Path, n: int = 20, timeline: Any = "default", step_file=None,
             **changes) -> Path:
    step_file = step_file or _step_file(tmp_path / "s.step.json", n)
    return write_results(tmp_path / "res.json", [_step_record(step_file, n, timeline, **changes)])


def _trace(results: Path, out: Path, *extra) -> Any:
    return run_cli(results, "--trace", out, "-q", *extra, module=TOTALS)


def _load(path: Path) -> Dict[str, Any]:
    return json.loads(path.read_text())


def _tracks(trace: Dict[str, Any]):
    """(process names by pid, thread names by (pid, tid), complete events by (pid, tid))."""
    processes, threads, events = {}, {}, {}
    for event in trace["traceEvents"]:
        if event["ph"] == "M" and event["name"] == "process_name":
            processes[event["pid"]] = event["args"]["name"]
        elif event["ph"] == "M" and event["name"] == "thread_name":
            threads[(event["pid"], event["tid"])] = event["args"]["name"]
        elif event["ph"] == "X":
            events.setdefault((event["pid"], event["tid"]), []).append(event)
        else:
            assert event["ph"] == "M" and event["name"] == "process_sort_index", event
    return processes, threads, events


def _check_trace(trace: Dict[str, Any], calls: int, pids=(1, 2)) -> Dict[Any, List[Dict]]:
    """The trace has exactly the expected tracks, one complete event per call on each track's
    calls thread, and every time non-negative and within its track's step."""
    processes, threads, events = _tracks(trace)
    assert set(processes) == set(pids)
    assert all(processes[1].startswith("original") for _ in [1] if 1 in pids)
    assert processes[2].startswith("replay")
    assert threads == {(pid, tid): name for pid in pids
                       for tid, name in ((1, "calls"), (2, "step"))}
    assert set(events) == {(pid, tid) for pid in pids for tid in (1, 2)}
    for pid in pids:
        [step] = events[(pid, 2)]
        assert step["name"] == "step" and step["ts"] == 0 and step["dur"] >= 0
        calls_of = events[(pid, 1)]
        assert len(calls_of) == calls
        last_end = 0.0
        for event in calls_of:
            assert event["cat"] == "call" and event["ts"] >= 0 and event["dur"] >= 0
            assert event["ts"] >= last_end - 1e-9  # in order, never overlapping
            last_end = event["ts"] + event["dur"]
            assert last_end <= step["dur"] + 1e-6  # within the step
            assert set(event["args"]) >= {"run", "call"}
            assert event["name"] == event["args"]["run"].split("|")[0]
    return events


# -- the timeline the step record keeps ------------------------------------------------------------
def _replayed_mlp(tmp_path: Path, iterations: int) -> Path:
    """A small MLP captured live and its step replayed: the results file."""
    x, w1, w2 = torch.randn(4, 8), torch.randn(8, 16), torch.randn(16, 3)
    _capture(lambda: _mlp(x, w1, w2), tmp_path / "mlp.json")
    out = tmp_path / "res.json"
    result = run_cli("-c", tmp_path / "mlp.json", "--replay-step", "-w", "1", "-i",
                     str(iterations), "--output", out)
    assert result.returncode == 0, result.stderr
    return out


def test_replay_step_keeps_its_representative_call_timed_step_call_by_call(tmp_path):
    out = _replayed_mlp(tmp_path, 5)
    [step] = [json.loads(line) for line in out.read_text().splitlines()
              if json.loads(line).get("kind") == "step"]
    details, timeline = step["step"], step["step"]["timeline"]
    assert timeline["version"] == 1 and timeline["layout"] == "measured"
    assert timeline["runs"] == ["aten::mm|0|0|0", "aten::relu|0|0|0", "aten::mm|0|0|1",
                                "aten::_softmax|0|0|0"] and timeline["run"] == [0, 1, 2, 3]
    starts, durations = timeline["start_us"], timeline["dur_us"]
    assert starts[0] == 0 and starts == sorted(starts) and all(d > 0 for d in durations)
    # one call after the other: each starts after the previous one ended
    assert all(starts[i + 1] >= starts[i] + durations[i] - 1e-3 for i in range(3))
    sums = details["per_call_sum_ms"]
    assert timeline["of"] == len(sums) == details["call_timed_steps"] == 5
    # the one nearest the median (the sums in the record are rounded: ties among them)
    middle = sorted(sums)[2]
    assert abs(sums[timeline["step"]] - middle) == min(abs(s - middle) for s in sums)
    assert timeline["sum_ms"] == pytest.approx(sums[timeline["step"]], abs=1e-3)
    assert sum(durations) / 1e3 == pytest.approx(timeline["sum_ms"], abs=1e-3)
    assert "cut" not in timeline


def test_representative_is_the_call_timed_step_nearest_the_median():
    assert representative([5.0, 1.0, 3.0, 9.0, 2.9]) == 2  # median 3.0
    assert representative([2.0, 4.0]) == 0  # median 3.0: equals, the first
    assert representative([7.0]) == 0


def test_failed_calls_have_no_time_and_a_device_lays_calls_end_to_end(tmp_path):
    timeline = _timeline(6, failed={2})
    assert timeline["start_us"][2] is None and timeline["dur_us"][2] is None
    assert timeline["start_us"][3] is not None
    x, w = torch.randn(4, 8), torch.randn(8, 16)
    _capture(lambda: torch.relu(x @ w).sum(), tmp_path / "s.json")
    replay = _replay(tmp_path / "s.json")
    replay.checked_pass()

    class FakeClock:  # stamps are squares of their numbers (ms): intervals 3, 7, 11 ms
        name, stamps = "fake_events", 0

        def stamp(self):
            self.stamps += 1
            return self.stamps * self.stamps

        def synchronize(self):
            return None

        @staticmethod
        def elapsed_ms(start, end):
            return float(end - start)

    replay.clock = FakeClock()
    times, starts = [0] * 3, [0] * 3
    replay.run_step_timed(times, starts)
    assert times == [3e6, 7e6, 11e6] and starts == [0, 3_000_000, 10_000_000]  # packed


def test_host_starts_are_measured_from_the_first_call(tmp_path):
    x, w = torch.randn(4, 8), torch.randn(8, 16)
    _capture(lambda: torch.relu(x @ w).sum(), tmp_path / "s.json")
    replay = _replay(tmp_path / "s.json")
    replay.checked_pass()
    times, starts = [0] * 3, [0] * 3
    replay.run_step_timed(times, starts)
    assert starts[0] == 0 and all(t > 0 for t in times)
    assert starts[1] >= times[0] and starts[2] >= starts[1] + times[1]


def test_the_timeline_is_bounded_for_long_steps():
    n = 100_000
    timeline = _timeline(n)
    size = len(json.dumps(timeline, separators=(",", ":")))
    assert len(timeline["run"]) == n and size < 3_500_000, size  # ~25-35 bytes a call
    longer = build_timeline(_keys(MAX_CALLS + 10), [False] * (MAX_CALLS + 10),
                            [([1000] * (MAX_CALLS + 10), [0] * (MAX_CALLS + 10))], "measured")
    assert len(longer["run"]) == MAX_CALLS and longer["cut"] is True
    wide = build_timeline([f"op{'x' * 1000}|0|0|{i}" for i in range(5000)], [False] * 5000,
                          [([1] * 5000, list(range(5000)))], "measured")
    assert wide["cut"] is True and sum(map(len, wide["runs"])) <= 4 * 2**20


# -- the Chrome / Perfetto trace --------------------------------------------------------------------
def test_trace_of_a_replayed_step_loads_back_with_both_tracks(tmp_path):
    """End to end: capture, replay the step, give the step file original times, export."""
    out = _replayed_mlp(tmp_path, 3)
    step_file = tmp_path / "mlp.step.json"
    data = json.loads(step_file.read_text())
    for i, call in enumerate(data["calls"]):
        call["original_us"], call["gap_us"] = 3.0 + i, 1.5
    data.update(real_step_us=40.0, real_host_us=30.0, tail_gap_us=2.0)
    step_file.write_text(json.dumps(data))
    trace_path = tmp_path / "step.trace.json"
    result = _trace(out, trace_path)
    assert result.returncode == 0, result.stderr
    assert f"trace: {trace_path} (4 calls on the original's track, 4 calls on the replay's " \
           "track)" in result.stderr
    trace = _load(trace_path)
    assert trace["displayTimeUnit"] == "ns"
    events = _check_trace(trace, 4)
    names = [[e["name"] for e in events[(pid, 1)]] for pid in (1, 2)]
    assert names[0] == names[1] == ["aten::mm", "aten::relu", "aten::mm", "aten::_softmax"]
    original = events[(1, 1)]
    assert [(e["ts"], e["dur"]) for e in original] == [(1.5, 3.0), (6.0, 4.0), (11.5, 5.0),
                                                       (18.0, 6.0)]
    assert original[0]["args"] == {"run": "aten::mm|0|0|0", "call": 0, "gap_us": 1.5}
    [step] = events[(1, 2)]
    assert step["dur"] == 40.0 and step["args"]["real_step_us"] == 40.0
    replayed = events[(2, 1)]
    assert [e["args"]["original_us"] for e in replayed] == [3.0, 4.0, 5.0, 6.0]
    assert replayed[0]["ts"] == 0
    line = 1 + [json.loads(text).get("kind") for text in
                out.read_text().splitlines()].index("step")
    assert trace["otherData"]["results"] == f"{out}:{line}"
    assert trace["otherData"]["step_file"] == str(step_file)


def test_a_step_of_10000_calls_exports_within_bounds(tmp_path):
    n = 10_000
    results = _results(tmp_path, n, step_file=_step_file(tmp_path / "s.step.json", n))
    out = tmp_path / "t.json"
    began = time.perf_counter()
    result = _trace(results, out)
    took = time.perf_counter() - began
    assert result.returncode == 0, result.stderr
    assert took < 10, took  # about 0.5 s on a quiet core
    assert out.stat().st_size < 4_000_000  # ~170 bytes an event
    _check_trace(_load(out), n)
    html = tmp_path / "r.html"
    began = time.perf_counter()
    report = run_cli(results, "-o", html, module=REPORT)
    assert report.returncode == 0 and report.stderr == "", report.stderr
    assert time.perf_counter() - began < 10
    text = html.read_text()
    rects = text.count('<rect class="call"')
    # sub-pixel calls merged: at most two rectangles a pixel per lane, far fewer than calls
    assert 100 < rects <= 2 * 2 * PLOT and 'data-merged="1"' in text
    assert len(text) < 2_000_000


def test_a_cut_timeline_says_so_in_the_trace_and_the_report(tmp_path):
    keys = _keys(12)
    timeline = build_timeline(keys, [False] * 12, [([1000] * 12, [i * 1000 for i in range(12)])],
                              "measured")
    timeline = {**timeline, "run": timeline["run"][:5], "start_us": timeline["start_us"][:5],
                "dur_us": timeline["dur_us"][:5], "cut": True}
    results = _results(tmp_path, 12, timeline=timeline)
    out = tmp_path / "t.json"
    assert _trace(results, out).returncode == 0
    trace = _load(out)
    _check_trace(trace, 5)
    assert trace["otherData"]["cut"] == "the record kept the first 5 calls' times"
    assert run_cli(results, "-o", tmp_path / "r.html", module=REPORT).returncode == 0
    assert "the step has 12 calls; the record kept the first 5 of them" in \
        (tmp_path / "r.html").read_text()


# -- hostile step records: a FILE:LINE warning, never a traceback; the report still renders ------
def _garbled(n: int = 4, **changes) -> Dict[str, Any]:
    timeline = _timeline(n)
    timeline.update(changes)
    return timeline


HOSTILE_TIMELINES = [
    (None, "step.timeline is missing (a step record written before the replay kept one"),
    ("fast", "step.timeline is not an object"),
    (_garbled(version=2), "step.timeline.version is 2, not 1"),
    (_garbled(layout="\x1b[2Jsideways"), "step.timeline.layout is \\x1b[2Jsideways, not one of "
                                         "measured, packed"),
    (_garbled(runs="aten::mm"), "step.timeline.runs is not a list"),
    (_garbled(runs=[5]), "step.timeline.runs[0] is not a run key"),
    (_garbled(runs=["x" * 2000]), "step.timeline.runs[0] is not a run key (text of 1 to 1024"),
    (_garbled(run=[0, 1, 7, 0]), "step.timeline.run[2] is not an index into runs (0 to 3)"),
    (_garbled(run=[0, 1, True, 0]), "step.timeline.run[2] is not an index into runs"),
    (_garbled(run=None), "step.timeline.run is missing"),
    (_garbled(start_us=[0, "1", 2, 3]), "step.timeline.start_us[1] is not a number from 0 "
                                        "to 1e+15"),
    (_garbled(start_us=[0, -1, 2, 3]), "step.timeline.start_us[1] is not a number"),
    (_garbled(dur_us=[1, 1, 1e300, 1]), "step.timeline.dur_us[2] is not a number"),
    (_garbled(dur_us=[1, 1, float("nan"), 1]), "step.timeline.dur_us[2] is not a number"),
    (_garbled(dur_us=[1, 1, float("inf"), 1]), "step.timeline.dur_us[2] is not a number"),
    (_garbled(dur_us=[1, None, 1, 1]), "step.timeline.dur_us[1] is not a number from 0 to "
                                       "1e+15 (null only with the other null"),
    (_garbled(dur_us=[1, 1, 1]), "step.timeline has 4 run, 4 start_us and 3 dur_us entries"),
    (_garbled(start_us=[0, 5, 3, 9]), "step.timeline.start_us[2] 3 is before the previous "
                                      "call's start (5)"),
    (_garbled(start_us=[None] * 4, dur_us=[None] * 4), "step.timeline has no call with a time"),
    (_garbled(cut="yes"), "step.timeline.cut is not true/false"),
    (_garbled(step=-1), "step.timeline.step is not a whole number >= 0"),
    (_garbled(sum_ms="1"), "step.timeline.sum_ms is not a number"),
    (_garbled(run=[0] * (MAX_CALLS + 1)), f"step.timeline.run holds {MAX_CALLS + 1} entries, "
                                          f"over the limit of {MAX_CALLS}"),
    (_timeline(9), "step.timeline holds 9 calls, more than the step's 4"),
]


@pytest.mark.parametrize("timeline, words", HOSTILE_TIMELINES,
                         ids=[f"t{i}" for i in range(len(HOSTILE_TIMELINES))])
def test_a_garbled_timeline_is_named_and_the_report_still_renders(tmp_path, timeline, words):
    results = _results(tmp_path, 4, timeline=timeline)
    where = f"{results}:2: step record's "
    out = tmp_path / "t.json"
    result = _trace(results, out)
    assert result.returncode == 2
    assert f"error: {where}{words}" in result.stderr and "no trace written" in result.stderr
    assert "Traceback" not in result.stderr and not out.exists()
    html = tmp_path / "r.html"
    report = run_cli(results, "-o", html, module=REPORT)
    assert report.returncode == 0
    assert f"warning: {where}{words}" in report.stderr
    assert "the step's timeline is left out of the report" in report.stderr
    text = html.read_text()
    assert "No timeline of the step" in text and "step-timeline" not in text
    assert "\x1b" not in text and "\x1b" not in report.stderr


def test_a_failed_step_replay_has_no_trace(tmp_path):
    results = _results(tmp_path, 4, timeline=None, status="error",
                       error={"type": "StepNotRun", "message": "no call of the step ran"})
    result = _trace(results, tmp_path / "t.json")
    assert result.returncode == 2
    assert f"error: {results}:2: the step replay did not run (no call of the step ran): no " \
           "timeline: no trace written" in result.stderr


def test_results_without_a_step_record_have_no_trace(tmp_path):
    results = write_results(tmp_path / "res.json", [])
    result = _trace(results, tmp_path / "t.json")
    assert result.returncode == 2
    assert f"error: {results}: no step record (run --replay-step writes one): no trace " \
           "written" in result.stderr


def test_the_step_record_of_a_results_file_with_damaged_lines_is_still_drawn(tmp_path):
    results = _results(tmp_path, 6)
    lines = results.read_text().splitlines()
    lines.insert(1, '{"op_name": "x", "id": ')  # a damaged line before the step record
    results.write_text("\n".join(lines) + "\n")
    result = _trace(results, tmp_path / "t.json")
    assert result.returncode == 0, result.stderr
    assert f"{results}:2:" in result.stderr  # the damaged line, named
    assert _load(tmp_path / "t.json")["otherData"]["results"] == f"{results}:3"


# -- the step file the original comes from --------------------------------------------------------
def test_a_missing_step_file_leaves_the_original_out_with_a_warning(tmp_path):
    results = _results(tmp_path, 5)
    (tmp_path / "s.step.json").unlink()
    out = tmp_path / "t.json"
    result = _trace(results, out)
    assert result.returncode == 0, result.stderr
    assert f"warning: {tmp_path / 's.step.json'}: " in result.stderr
    assert "the original's track is left out" in result.stderr
    assert "trace: " in result.stderr and "5 calls on the replay's track" in result.stderr
    _check_trace(_load(out), 5, pids=(2,))
    report = run_cli(results, "-o", tmp_path / "r.html", module=REPORT)
    assert report.returncode == 0 and "the original's track is left out" in report.stderr
    text = (tmp_path / "r.html").read_text()
    assert text.count('class="lane"') == 1 and "the original&#x27;s track is left out" in text


@pytest.mark.parametrize("make, words", [
    (lambda p: _step_file(p, 5, keys=["aten::mm|0|0|0"] * 5),
     "is not the step that was replayed: call 1 runs aten::mm|0|0|0 there, aten::relu|0|0|1 "
     "in the record"),
    (lambda p: _step_file(p, 7), "has 7 calls, the step replayed in"),
    (lambda p: _step_file(p, 5, original=False), "holds no original time per call"),
    (lambda p: p.write_text("{not json"), "not valid JSON"),
    (lambda p: p.write_text(json.dumps({"format": "param_compute.step", "version": 9,
                                        "calls": []})), "unsupported version 9"),
    (lambda p: p.mkdir(), "is a directory"),
    (lambda p: os.mkfifo(p), "FIFO"),
])
def test_a_foreign_or_unusable_step_file_leaves_the_original_out(tmp_path, make, words):
    step_file = tmp_path / "s.step.json"
    results = _results(tmp_path, 5, step_file=step_file)  # the record names it
    make(step_file)
    out = tmp_path / "t.json"
    result = _trace(results, out)
    assert result.returncode == 0, result.stderr
    warning = [line for line in result.stderr.splitlines() if line.startswith("warning: ")]
    assert len(warning) == 1 and str(step_file) in warning[0] and \
        "the original's track is left out" in warning[0], result.stderr
    assert words in warning[0], warning[0]
    _check_trace(_load(out), 5, pids=(2,))
    assert run_cli(results, "-o", tmp_path / "r.html", module=REPORT).returncode == 0


def test_step_names_the_step_file_and_a_hostile_name_is_escaped(tmp_path):
    elsewhere = _step_file(tmp_path / "other.step.json", 5)
    hostile = tmp_path / "\x1b[31mgone.step.json"
    results = _results(tmp_path, 5, step_file=hostile)
    plain = _trace(results, tmp_path / "t.json")
    assert plain.returncode == 0 and "\x1b" not in plain.stderr
    assert "\\x1b[31mgone.step.json" in plain.stderr
    given = _trace(results, tmp_path / "t2.json", "--step", elsewhere)
    assert given.returncode == 0 and "warning" not in given.stderr, given.stderr
    _check_trace(_load(tmp_path / "t2.json"), 5)
    report = run_cli(results, "-o", tmp_path / "r.html", "--step", elsewhere, module=REPORT)
    assert report.returncode == 0 and report.stderr == ""
    assert (tmp_path / "r.html").read_text().count('class="lane"') == 2


def test_the_step_file_is_found_beside_the_results_when_moved(tmp_path):
    (tmp_path / "run").mkdir()
    _step_file(tmp_path / "run" / "s.step.json", 5)
    results = write_results(tmp_path / "run" / "res.json", [_step_record(
        Path("work/s.step.json"), 5)])  # relative to where the run started, elsewhere
    result = _trace(results, tmp_path / "t.json")
    assert result.returncode == 0 and "warning" not in result.stderr, result.stderr
    _check_trace(_load(tmp_path / "t.json"), 5)


# -- the command line ---------------------------------------------------------------------------
def test_trace_output_is_checked_before_anything_is_read(tmp_path):
    results = _results(tmp_path, 4)
    same = _trace(results, results)
    assert same.returncode == 2 and "--trace" in same.stderr and "is the results file" in \
        same.stderr
    assert _trace(results, tmp_path).returncode == 2  # a directory
    (tmp_path / "link.json").symlink_to(tmp_path / "elsewhere.json")
    linked = _trace(results, tmp_path / "link.json")
    assert linked.returncode == 2 and "link" in linked.stderr
    assert not (tmp_path / "elsewhere.json").exists()
    onto_step = _trace(results, tmp_path / "s.step.json", "--step", tmp_path / "s.step.json")
    assert onto_step.returncode == 2 and "is the step file" in onto_step.stderr
    alone = run_cli(results, "--step", tmp_path / "s.step.json", module=TOTALS)
    assert alone.returncode == 2 and "--step goes with --trace" in alone.stderr


def test_trace_goes_with_the_ledger_and_its_tables(tmp_path):
    results = _results(tmp_path, 4)
    out = tmp_path / "t.json"
    printed = run_cli(results, "--trace", out, "--json", module=TOTALS)
    assert printed.returncode == 0 and json.loads(printed.stdout)["ops"] == []
    assert out.exists()


# -- the report's timeline --------------------------------------------------------------------------
def test_report_draws_two_lanes_coloured_by_op_with_a_legend_and_titles(tmp_path):
    results = _results(tmp_path, 8)
    html = tmp_path / "r.html"
    report = run_cli(results, "-o", html, module=REPORT)
    assert report.returncode == 0 and report.stderr == "", report.stderr
    text = html.read_text()
    section = text[text.index("<h2>The step, call by call</h2>"):]
    assert section.count('<g class="lane"') == 2
    assert 'data-lane="original"' in section and 'data-lane="replay"' in section
    assert section.index('data-lane="original"') < section.index('data-lane="replay"')
    assert section.count('<rect class="call"') == 16  # 8 calls a lane, none merged
    assert "<title>aten::mm: call 0 (aten::mm|0|0|0), starts at 0.00 µs, takes 1.00 µs" \
           "</title>" in section
    assert section.count('<g class="entry">') == 5  # the five ops in the legend
    assert "replay: call-timed step 1 of 3 kept" in section
    assert "the step ends at" in section


def test_report_escapes_hostile_op_names_in_the_timeline(tmp_path):
    keys = ['<script>alert(1)</script>|0|0|0', 'a"onmouseover="x|0|0|0']
    timeline = build_timeline(keys, [False, False], [([1000, 2000], [0, 1500])], "measured")
    step_file = _step_file(tmp_path / "s.step.json", 2, keys=keys)
    results = write_results(tmp_path / "res.json", [_step_record(step_file, 2, timeline)])
    assert run_cli(results, "-o", tmp_path / "r.html", module=REPORT).returncode == 0
    text = (tmp_path / "r.html").read_text()
    assert "<script>" not in text and 'a"onmouseover' not in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    out = tmp_path / "t.json"
    assert _trace(results, out).returncode == 0
    names = {e["name"] for e in _load(out)["traceEvents"] if e.get("cat") == "call"}
    assert names == {"<script>alert(1)</script>", 'a"onmouseover="x'}


def test_sub_pixel_calls_are_merged_and_keep_their_time():
    calls = [Call(i, OPS[i % 2], f"{OPS[i % 2]}|0|0|0", i * 0.01, 0.008) for i in range(10_000)]
    calls.append(Call(10_000, "aten::big", "aten::big|0|0|0", 100.0, 100.0))
    scale = PLOT / 200.0  # 5 px a µs: 50 calls a pixel
    drawn = boxes(calls, scale)
    assert len(drawn) <= 2 * PLOT
    assert sum(len(box.calls) for box in drawn) == len(calls)
    assert drawn[-1].calls == [calls[-1]] and drawn[-1].op() == "aten::big"
    merged = drawn[0]
    assert len(merged.calls) > 1 and merged.x1 - merged.x0 < 1.0
    assert math.isclose(sum(merged.time.values()), 0.008 * len(merged.calls))
    assert merged.title().startswith(f"{len(merged.calls)} calls merged (0 to ")


@pytest.mark.parametrize("named", [5, ["s.step.json"], "", "s\x00.step.json", None])
def test_a_record_naming_no_usable_step_file_leaves_the_original_out(tmp_path, named):
    results = _results(tmp_path, 4)
    record = json.loads(results.read_text().splitlines()[1])
    record["config"]["input"]["step_file"] = named
    write_results(results, [record])
    result = _trace(results, tmp_path / "t.json")
    assert result.returncode == 0, result.stderr
    assert f"warning: {results}:2: the step record names no step file: the original's track " \
           "is left out (--step FILE names one)" in result.stderr
    _check_trace(_load(tmp_path / "t.json"), 4, pids=(2,))


def test_the_last_step_record_of_an_appended_file_is_drawn(tmp_path):
    first = _step_record(_step_file(tmp_path / "a.step.json", 3), 3)
    second = _step_record(_step_file(tmp_path / "b.step.json", 6), 6)
    results = write_results(tmp_path / "res.json", [first])
    appended = write_results(tmp_path / "more.json", [second]).read_text()
    with open(results, "a", encoding="utf-8") as out:
        out.write(appended)
    result = _trace(results, tmp_path / "t.json")
    assert result.returncode == 0, result.stderr
    trace = _load(tmp_path / "t.json")
    _check_trace(trace, 6)
    assert trace["otherData"]["results"] == f"{results}:5"
    assert trace["otherData"]["step_file"].endswith("b.step.json")


def test_many_ops_share_one_grey_and_zero_length_steps_still_draw(tmp_path):
    keys = [f"aten::op{i}|0|0|0" for i in range(14)]
    timeline = build_timeline(keys, [False] * 14, [([0] * 14, [0] * 14)], "measured")
    results = write_results(tmp_path / "res.json", [_step_record(
        _step_file(tmp_path / "s.step.json", 14, original=False, keys=keys), 14, timeline)])
    report = run_cli(results, "-o", tmp_path / "r.html", module=REPORT)
    assert report.returncode == 0 and "holds no original time per call" in report.stderr
    text = (tmp_path / "r.html").read_text()
    assert text.count('<g class="entry">') == 11 and "4 other ops" in text
    assert text.count('<rect class="call"') == 1  # 14 calls of no time: one merged box
    out = tmp_path / "t.json"
    assert _trace(results, out).returncode == 0
    events = _check_trace(_load(out), 14, pids=(2,))
    assert all(e["dur"] == 0 and e["ts"] == 0 for e in events[(2, 1)])


def test_a_trace_that_cannot_be_written_is_one_line_and_leaves_nothing(tmp_path, monkeypatch):
    import errno

    import param_compute.files as files

    def full(path, text):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    monkeypatch.setattr(files, "write_new", full)
    results = _results(tmp_path, 4)
    out = tmp_path / "t.json"
    result = _trace(results, out)
    assert result.returncode == 2 and not out.exists()
    assert result.stderr.strip().splitlines()[-1] == \
        f"error: cannot write {out}: No space left on device"
