"""The results-file module: reading (header, records, finish, problems by line), the torn-line
rule, bounded reads, repairs before appending, and the writer."""

from __future__ import annotations

import json
import os

import pytest

from param_compute.results.file import (ResultsFileError, ResultsWriter, SYNC_EVERY,
                                        read_results, repair_tail, scan_lines, write_results)

HEADER = {"run_options": {"device": "cpu"}, "sys_info": {"hostname": "h"}, "start_time": "t0"}


def record(i: int) -> dict:
    return {"op_name": "torch.add", "id": f"0|0|0_{i}", "status": "ok"}


def write(path, *lines: str) -> None:
    path.write_bytes("".join(lines).encode())


def line(value) -> str:
    return json.dumps(value) + "\n"


def test_header_records_finish_and_other_lines(tmp_path):
    path = tmp_path / "r.json"
    batch = {"ncu_file": "r_ncu_1.csv", "start_run_id": "0|0|0_0", "end_run_id": "0|0|0_1"}
    resume = {"resume_time": "t1", "completed_runs": 2}
    write(path, line(HEADER), line(record(0)), line(record(1)), line(batch), "\n",
          line(resume), line(record(2)), line({"finish_time": "t2", "runs_ok": 3}))
    read = read_results(path)
    assert read.header == HEADER and read.headers == [HEADER]
    assert [r["id"] for r in read.records] == ["0|0|0_0", "0|0|0_1", "0|0|0_2"]
    assert read.record_lines == [2, 3, 7]  # the blank line 5 counts, and is no problem
    assert read.batches == [(4, batch)] and read.extras == [] and read.markers == [resume]
    assert read.finish == {"finish_time": "t2", "runs_ok": 3}
    assert read.problems == [] and not read.torn_line
    assert read.run_options == {"device": "cpu"} and read.sys_info == {"hostname": "h"}


def test_damaged_middle_line_is_reported_with_its_number_and_cuts_nothing(tmp_path):
    path = tmp_path / "r.json"
    records = [line(record(i)) for i in range(250)]
    records[99] = '{"op_name": "torch.add", "id": "0|0|0_99", "sta\n'  # damaged, line 101
    write(path, line(HEADER), *records, line({"finish_time": "t"}))
    size = path.stat().st_size
    read = read_results(path)
    assert len(read.records) == 249 and read.finish == {"finish_time": "t"}
    [problem] = read.problems
    assert problem.line == 101 and not problem.torn and "not JSON" in problem.reason
    assert read.warnings() == [f"{path}:101: {problem.reason} (line not used)"]
    # nothing to repair before appending: the damaged line is not the last one
    assert repair_tail(path) is None and path.stat().st_size == size
    # appending keeps every record, the damaged line included
    writer, cut = ResultsWriter.resume(path, {"resume_time": "t3"})
    writer.write(record(99))
    writer.close()
    assert cut is None
    again = read_results(path)
    assert len(again.records) == 250 and [p.line for p in again.problems] == [101]


@pytest.mark.parametrize("content,reason", [
    ("[1, 2]\n", "a JSON list, not an object"),
    ('"text"\n', "a JSON string, not an object"),
    (b"\xff\xfe{}\n", "not UTF-8 text"),
    ("[" * 100_000 + "\n", "nested too deeply"),
])
def test_kinds_of_damage(tmp_path, content, reason):
    path = tmp_path / "r.json"
    body = content if isinstance(content, bytes) else content.encode()
    path.write_bytes(line(HEADER).encode() + body + line(record(0)).encode())
    read = read_results(path)
    [problem] = read.problems
    assert problem.line == 2 and reason in problem.reason
    assert [r["id"] for r in read.records] == ["0|0|0_0"]


def test_torn_last_line_is_the_only_cut(tmp_path):
    path = tmp_path / "r.json"
    whole = line(HEADER) + line(record(0))
    write(path, whole, line(record(1))[:25])  # killed mid-write
    read = read_results(path)
    assert [r["id"] for r in read.records] == ["0|0|0_0"]
    assert read.torn_line and read.torn.line == 3 and read.damaged == []
    cut = repair_tail(path)
    assert cut.torn and cut.line == 3 and cut.offset == len(whole.encode())
    assert path.read_text() == whole
    # a whole last line that only lacks its line break is kept and ended, not cut
    write(path, whole, json.dumps(record(1)))
    assert not read_results(path).problems
    assert repair_tail(path) is None
    assert path.read_text() == whole + line(record(1))


def test_oversized_line_is_skipped_without_being_held(tmp_path):
    path = tmp_path / "r.json"
    big = {"op_name": "torch.add", "id": "0|0|0_1", "pad": "x" * 5000}
    write(path, line(HEADER), line(record(0)), line(big), line(record(2)))
    read = read_results(path, max_line_bytes=1000)
    assert [r["id"] for r in read.records] == ["0|0|0_0", "0|0|0_2"]
    [problem] = read.problems
    assert problem.line == 3 and "longer than 1000 bytes" in problem.reason
    assert problem.size == len(line(big)) and not problem.torn
    # the same line last and without its line break: torn
    write(path, line(HEADER), json.dumps(big))
    [problem] = read_results(path, max_line_bytes=1000).problems
    assert problem.torn and problem.line == 2


@pytest.mark.parametrize("target,message", [
    ("/dev/zero", "is a device, not a regular file"),
    ("DIR", "is a directory"),
    ("FIFO", "is a FIFO, not a regular file"),
    ("MISSING", "no such file"),
])
def test_non_regular_or_missing_files_are_refused(tmp_path, target, message):
    if target == "DIR":
        target = tmp_path
    elif target == "FIFO":
        target = tmp_path / "fifo"
        os.mkfifo(target)  # opening it for reading must not hang
    elif target == "MISSING":
        target = tmp_path / "missing.json"
    with pytest.raises(ResultsFileError, match=message):
        read_results(target)


@pytest.mark.parametrize("content,message", [
    ("", "it is empty"),
    ('{"torch.add": {"config": []}}\n', "first line is not a header"),
    ("{\n", "line 1 is not JSON"),
    ("[1]\n", "line 1 is a JSON list, not an object"),
])
def test_what_is_not_a_results_file(tmp_path, content, message):
    path = tmp_path / "r.json"
    path.write_text(content)
    with pytest.raises(ResultsFileError, match=message):
        read_results(path)


def test_writer_create_append_resume_and_finish(tmp_path):
    path = tmp_path / "sub" / "r.json"
    writer = ResultsWriter.create(path, HEADER, sync=SYNC_EVERY)
    writer.write(record(0))
    writer.write(record(1), flush=False)
    writer.finish({"finish_time": "t1"})
    assert writer.closed and writer.lines == 4
    # -a: a second header after what is there; a torn tail is cut off first
    with open(path, "a") as stream:
        stream.write('{"op_name": "torch.add", "id": "0|0')
    writer = ResultsWriter.create(path, HEADER, append=True)
    writer.finish({"finish_time": "t2"})
    read = read_results(path)
    assert len(read.headers) == 2 and len(read.finishes) == 2 and read.problems == []
    assert [r["id"] for r in read.records] == ["0|0|0_0", "0|0|0_1"]
    # resume: the marker after the records; the torn line it cut is reported
    with open(path, "a") as stream:
        stream.write('{"op_na')
    writer, cut = ResultsWriter.resume(path, {"resume_time": "t3"})
    writer.close()
    assert cut is not None and cut.line == 7
    assert read_results(path).markers == [{"kind": "resume", "resume_time": "t3"}]
    # a whole file at once (merge); a line break inside a value stays inside its line
    write_results(tmp_path / "m.json", HEADER, [dict(record(0), note="a\nb")],
                  {"finish_time": "t"})
    assert len((tmp_path / "m.json").read_text().splitlines()) == 3


def test_unflushed_lines_are_gathered_whole_and_kept_in_order(tmp_path):
    """Lines left unflushed (dry-run records) reach the file a batch of whole lines at a time,
    before any later flushed line, and all of them by the finish line."""
    path = tmp_path / "r.json"
    writer = ResultsWriter.create(path, HEADER)
    for i in range(ResultsWriter.BATCH_LINES * 2 + 5):
        writer.write(record(i), flush=False)
        assert path.read_bytes().endswith(b"\n")  # whole lines only, whatever was written
    writer.write(record(-1))  # flushed: every line before it is in the file first
    lines = path.read_text().splitlines()
    assert len(lines) == 1 + ResultsWriter.BATCH_LINES * 2 + 5 + 1
    assert [json.loads(text)["id"] for text in lines[1:]] == (
        [f"0|0|0_{i}" for i in range(ResultsWriter.BATCH_LINES * 2 + 5)] + ["0|0|0_-1"])
    writer.write(record(7), flush=False)
    writer.close()  # closing writes what is gathered
    assert json.loads(path.read_text().splitlines()[-1])["id"] == "0|0|0_7"
    assert writer.lines == len(path.read_text().splitlines())


def test_encode_line_is_the_encoders_text():
    """``encode_line``'s one C encoder writes what ``json.JSONEncoder.encode`` would."""
    from pathlib import Path

    from param_compute.results.file.writing import _ENCODER, encode_line

    values = [record(0), {"a": float("nan"), "b": [1.5, -0.0, 1e300, float("inf"), 2 ** 70],
                          "c": "caf\u00e9 \u2028 \x00 \"q\"", "d": (1, 2), "e": {3},
                          "f": Path("/x"), "g": None, 1: True, 2.5: {"h": []}}]
    for value in values:
        assert encode_line(value) == _ENCODER.encode(value) + "\n"
    with pytest.raises(TypeError, match="not JSON serializable"):
        encode_line({"x": object()})


def test_writer_refuses_an_unwritable_place(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(ResultsFileError, match="cannot write"):
        ResultsWriter.create(tmp_path / "file" / "r.json", HEADER)


def test_scan_lines_streams_one_line_at_a_time(tmp_path):
    path = tmp_path / "r.json"
    write(path, line(HEADER), line(record(0)), "{oops\n")
    scanned = list(scan_lines(path))
    assert [s.number for s in scanned] == [1, 2, 3]
    assert [s.kind for s in scanned] == ["header", "run", None]
    assert scanned[2].problem.offset == len(line(HEADER)) + len(line(record(0)))


def test_resume_keeps_valid_records_after_a_damaged_line(tmp_path):
    """250 records with one damaged line in the middle and a torn last line: resuming keeps all
    249 valid records, reruns only the damaged one, and cuts only the torn tail."""
    from conftest import run_cli, simple_op, tensor, write_spec

    spec = write_spec(tmp_path, simple_op("torch.add", tensor([1, 250], __range__=["shape"]),
                                          iterator="RangeConfigIterator"))
    out = tmp_path / "r.json"
    assert run_cli("-c", spec, "--dry-run", "--output", out).returncode == 0
    lines = out.read_text().splitlines(keepends=True)
    assert len(lines) == 252
    lines[100] = lines[100][:40] + "\n"  # run 0|0|0_99 damaged (line 101)
    out.write_text("".join(lines[:-1]) + lines[-1][:20])  # the finish line torn
    result = run_cli("-c", spec, "--dry-run", "--resume", "--output", out)
    assert result.returncode == 0, result.stderr
    assert f"{out}:101: not JSON" in result.stderr
    read = read_results(out)
    ids = [r["id"] for r in read.records]
    assert len(ids) == 250 == len(set(ids)) and ids[-1] == "0|0|0_99"  # rerun at the end
    assert [p.line for p in read.problems] == [101]  # kept in place, still reported
    [marker] = read.markers
    assert marker["completed_runs"] == 249 and marker["damaged_lines"] == [101]
    assert marker["dropped_torn_line"] is True


def test_tools_report_damaged_lines_and_use_the_rest(tmp_path):
    from conftest import run_cli

    path = tmp_path / "r.json"
    write(path, line(HEADER), line(record(0)), "{oops\n", line(record(1)),
          line({"finish_time": "t"}))
    result = run_cli(path, "--csv", tmp_path / "r.csv", module="param_compute.exporters")
    assert result.returncode == 0, result.stderr
    assert f"warning: {path}:3: not JSON" in result.stderr and "Traceback" not in result.stderr
    assert len((tmp_path / "r.csv").read_text().splitlines()) == 3  # the header row and 2 runs
    result = run_cli(path, path, module="param_compute.compare")
    assert result.returncode == 0 and result.stderr.count(f"{path}:3:") == 2


def test_planned_lines_are_the_records_own_text():
    """A planned run's line made from parts (``PlannedLines``) is, to the byte, the text of the
    record's JSON form; records it does not cover are left to the whole encoding (None)."""
    hypothesis = pytest.importorskip("hypothesis")
    from hypothesis import strategies as st

    from param_compute.results.file import encode_line
    from param_compute.results.records import PassResult, RunError, RunRecord
    from param_compute.results.sinks.jsonl import PlannedLines

    text = st.text(max_size=8) | st.sampled_from(["torch.add", "aten::mul", 'a"b\\c', "caf\u00e9",
                                                   "\u2028", "\ud800"])
    scalars = st.none() | st.booleans() | st.integers() | st.floats() | text
    values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3)
                          | st.dictionaries(text, inner, max_size=3), max_leaves=12)
    inputs = st.fixed_dictionaries({"args": st.lists(values, max_size=2)}, optional={
        "count": st.none() | st.integers(1, 9), "original_us": st.none() | values,
        "kwargs": st.dictionaries(text, values, max_size=2)})
    configs = st.fixed_dictionaries({"build": st.none() | values, "input": inputs}) | values
    records = st.builds(
        RunRecord, op_name=text | st.integers(), id=text, config=configs,
        status=st.sampled_from(["dry-run", "dry-run", "ok", "error"]),
        passes=st.sampled_from([[], [], [PassResult("forward", [1.0], [2.0])]]),
        error=st.none() | st.just(RunError("E", "m", "forward")),
        verify=st.none() | st.just({"status": "PASS"}))
    planned = PlannedLines()
    covered = []

    @hypothesis.settings(max_examples=400, deadline=None, database=None)
    @hypothesis.given(record=records)
    def check(record):
        line = planned(record)
        if line is not None:
            assert line == encode_line(record.to_json())
            covered.append(record)

    check()
    assert covered  # the commonest record, a plain planned run, is made from parts
