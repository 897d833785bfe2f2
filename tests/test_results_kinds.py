"""Results lines say their kind, the header its format version; older files are still read.

Every line written since format version 2 carries ``"kind"`` (header, run, step, finish, resume,
batch) first; a file without kinds (ours before, PARAM's) has them guessed from the keys, only
for lines that say none, and an old ``step_replay`` line reads as today's step record. The tools
read through one typed reader, so a garbled step line is warned with its file and line by each
of them instead of being dropped silently or half used.
"""

from __future__ import annotations

import json

from conftest import EXAMPLES, run_cli
from param_compute.analysis.rounds import join_rounds
from param_compute.results.file import (FORMAT_VERSION, ResultsStream, ResultsWriter,
                                        read_results, write_results)

HEADER = {"run_options": {"device": "cpu", "num_threads": 1, "config_file": "/x/w.json"},
          "sys_info": {"hostname": "h", "device": "cpu", "machine": "x86_64",
                       "pytorch_version": "2.13.0", "pytorch_num_threads": 1},
          "start_time": "2026-01-01T00:00:00"}


def record(i, median=1.0, count=2, original=1000.0):
    return {"op_name": "aten::mm", "id": f"{i}|0|0", "status": "ok", "count": count,
            "original_us": {"cpu": original, "device": None},
            "metric": {"forward": {"measure.time": [median] * 3}},
            "stats": {"forward": {"n": 3, "median": median, "ci_low": median * 0.99,
                                  "ci_high": median * 1.01}},
            "config": {"build": None, "input": {"args": [], "count": count}}}


def old_step(**extra):
    return {"step_replay": {"step_file": "w.step.json", "calls": 4, "replayed_calls": 4,
                            "iterations": 3, "step_ms": [5.0, 5.2, 4.9],
                            "stats": {"n": 3, "median": 5.0, "ci_low": 4.9, "ci_high": 5.2},
                            "configs": {"aten::mm|0|0|0": {"in_step_us": 1200.0, "calls": 2}},
                            **extra}}


def lines_of(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def write_lines(path, *values):
    path.write_text("".join((v if isinstance(v, str) else json.dumps(v)) + "\n"
                            for v in values))
    return path


def test_every_line_a_run_writes_says_its_kind_and_the_header_its_version(tmp_path):
    out = tmp_path / "r.json"
    assert run_cli("-c", EXAMPLES / "simple_add.json", "-i", "2", "--output", out
                   ).returncode == 0
    lines = lines_of(out)
    assert all(next(iter(line)) == "kind" for line in lines), lines
    assert [line["kind"] for line in lines] == ["header", "run", "finish"]
    assert lines[0]["format_version"] == FORMAT_VERSION == 2
    # resumed: the marker says its kind too, and the file reads back whole
    assert run_cli("-c", EXAMPLES / "simple_add.json", "-i", "2", "--output", out, "--resume"
                   ).returncode == 0
    kinds = [line["kind"] for line in lines_of(out)]
    assert kinds == ["header", "run", "finish", "resume", "finish"]
    assert read_results(out).problems == []


def test_a_written_file_gives_a_kind_to_lines_that_say_none(tmp_path):
    """A merge or a join writes records read from files without kinds: they leave as runs,
    under a header of this version whatever version the source header had."""
    path = tmp_path / "m.json"
    write_results(path, dict(HEADER, format_version=1, kind="header"), [record(0)],
                  {"finish_time": "t"})
    header, run, finish = lines_of(path)
    assert list(header)[:2] == ["kind", "format_version"] and header["format_version"] == 2
    assert (run["kind"], finish["kind"]) == ("run", "finish")
    writer, _ = ResultsWriter.resume(path, {"resume_time": "t2"})
    writer.write({"kind": "batch", "ncu_file": "r_ncu_1.csv"})
    writer.close()
    assert [line["kind"] for line in lines_of(path)] == ["header", "run", "finish", "resume",
                                                          "batch"]


def test_a_file_without_kinds_is_read_with_its_kinds_guessed(tmp_path):
    path = write_lines(tmp_path / "old.json", HEADER, record(0),
                       {"ncu_file": "r_ncu_1.csv", "start_run_id": "0|0|0"},
                       {"resume_time": "t1"}, record(1), old_step(),
                       {"note": "a sink's own line"}, {"finish_time": "t2"})
    read = read_results(path)
    assert read.problems == [] and read.record_lines == [2, 5, 6]  # the step record is one
    assert [(r["op_name"], r["id"]) for r in read.records] == [
        ("aten::mm", "0|0|0"), ("aten::mm", "1|0|0"), ("step_replay", "0|0|0")]
    assert read.batches == [(3, {"ncu_file": "r_ncu_1.csv", "start_run_id": "0|0|0"})]
    assert read.markers == [{"resume_time": "t1"}] and read.finish == {"finish_time": "t2"}
    assert read.extras == [(7, {"note": "a sink's own line"})]
    [(number, step)] = read.steps
    assert number == 6
    assert {key: step[key] for key in ("kind", "op_name", "id", "status")} == {
        "kind": "step", "op_name": "step_replay", "id": "0|0|0", "status": "ok"}
    assert step["stats"] == {"step": {"n": 3, "median": 5.0, "ci_low": 4.9, "ci_high": 5.2}}
    assert step["metric"] == {"step": {"measure.time": [5.0, 5.2, 4.9]}}
    assert step["config"] == {"input": {"step_file": "w.step.json", "calls": 4}}
    assert step["step"]["configs"] == {"aten::mm|0|0|0": {"in_step_us": 1200.0, "calls": 2}}
    assert step["step"]["calls"] == 4 and "stats" not in step["step"]


def test_an_old_failed_step_replay_reads_as_an_error_record(tmp_path):
    path = write_lines(tmp_path / "old.json", HEADER, old_step(
        error="RuntimeError: out of memory", stats=None, step_ms=[]))
    [(_, step)] = read_results(path).steps
    assert step["status"] == "error"
    assert step["error"] == {"type": "RuntimeError", "message": "out of memory",
                             "phase": "step"}


def test_the_kind_a_line_says_wins_over_its_keys(tmp_path):
    """A line that says its kind is never guessed: a step record is a record with its step's
    details; a line of a kind this version does not know is reported, not used."""
    step = {"kind": "step", "op_name": "step_replay", "id": "0|0|0", "status": "ok",
            "metric": {}, "stats": {"step": {"median": 2.0}}, "config": {},
            "step": {"configs": {}}}
    path = write_lines(tmp_path / "r.json", dict(HEADER, kind="header", format_version=2),
                       dict(record(0), kind="run"), step,
                       {"kind": "future", "op_name": "x", "id": "1|0|0"})
    read = read_results(path)
    assert read.records == [dict(record(0), kind="run"), step] and read.steps == [(3, step)]
    [problem] = read.problems
    assert problem.line == 4 and problem.reason.startswith(
        "a line of unknown kind ('future'; this version reads header, run, step, finish")


GARBLED = [  # (the line, what the warning says after FILE:LINE:)
    (old_step(calls=-1), "step record's step.calls is not a whole number"),
    ({"kind": "step", "op_name": "step_replay", "id": "0|0|0", "status": "ok",
      "stats": {"step": {"median": 5.0}}, "config": {},
      "step": {"configs": {"aten::mm|0|0|0": {"in_step_us": "fast"}}}},
     "step record's step.configs[aten::mm|0|0|0].in_step_us is not a number"),
    ({"step_replay": "done"}, "step line's step_replay is not an object"),
]


def test_a_garbled_step_line_is_warned_with_file_and_line_by_every_tool(tmp_path):
    for index, (line, said) in enumerate(GARBLED):
        path = write_lines(tmp_path / f"r{index}.json", HEADER, record(0), line,
                           {"finish_time": "t"})
        warning = f"{path}:3: {said}"
        for module, args in (("param_compute.workload_totals", [path]),
                             ("param_compute.analysis.report",
                              [path, "-o", tmp_path / f"r{index}.html"]),
                             ("param_compute.analysis.compare", [path, path]),
                             ("param_compute.cli.history",
                              ["add", path, "--label", "v", "--db", tmp_path / f"h{index}.db"])):
            done = run_cli(*args, module=module)
            assert done.returncode == 0, (module, done.stderr)
            assert warning in done.stderr, (module, done.stderr)
        stream = ResultsStream(path)
        assert [line.kind for line in stream.lines()] == ["run", "finish"]
        assert stream.steps == [] and stream.problem_count == 1


def test_the_ledger_reads_the_step_record_old_or_new(tmp_path):
    new = {"kind": "step", "op_name": "step_replay", "id": "0|0|0", "status": "ok",
           "metric": {"step": {"measure.time": [5.0]}},
           "stats": {"step": {"n": 1, "median": 5.0}}, "config": {},
           "step": {"calls": 4, "configs": {"aten::mm|0|0|0": {"in_step_us": 1200.0,
                                                               "calls": 2}}}}
    for name, step in (("old", old_step()), ("new", new)):
        path = write_lines(tmp_path / f"{name}.json", HEADER, record(0), step)
        done = run_cli("--json", path, module="param_compute.workload_totals")
        assert done.returncode == 0 and done.stderr == "", done.stderr
        ledger = json.loads(done.stdout)
        assert ledger["in_step_ms"] == 5.0 and ledger["step_replay"]["calls"] == 4
        assert ledger["step_replay"]["iterations"] == {"old": 3, "new": 1}[name]
        [row] = ledger["ops"]
        assert row["in_step_ms"] == 2.4 and row["isolated_ms"] == 2.0


def test_joined_rounds_keep_the_step_record(tmp_path, capsys):
    """ab's rounds read through the typed reader: an old round's step line is joined as the
    step record it reads as."""
    rounds = [write_lines(tmp_path / f"a{i}.json", HEADER, record(0, 1.0 + i), old_step())
              for i in range(2)]
    out = tmp_path / "a.json"
    assert join_rounds(rounds, out, {}) == 2
    read = read_results(out)
    assert [line["kind"] for line in lines_of(out)] == ["header", "run", "step", "finish"]
    [(_, step)] = read.steps
    assert step["metric"]["step"]["measure.time"] == [5.0, 5.2, 4.9] * 2
    assert step["stats"]["step"]["repetition_medians"] == [5.0, 5.0]
    assert step["step"]["configs"] == {"aten::mm|0|0|0": {"in_step_us": 1200.0, "calls": 2}}
    garbled = write_lines(tmp_path / "a2.json", HEADER, record(0), old_step(calls=-1))
    assert join_rounds(rounds + [garbled], out, {}) == 2  # its run joined, its step said
    assert f"{garbled}:3: step record's step.calls is not a whole number" in \
        capsys.readouterr().err


_NAN, _INF = float("nan"), float("inf")


def _step(stats=None, metric=None, **step):
    details = {"calls": 4, "configs": {"aten::mm|0|0|0": {"in_step_us": 1200.0, "calls": 2}},
               **step}
    return {"kind": "step", "op_name": "step_replay", "id": "0|0|0", "status": "ok",
            "metric": {"step": {"measure.time": [5.0]}} if metric is None else metric,
            "stats": {"step": {"n": 3, "median": 5.0, "ci_low": 4.9, "ci_high": 5.1}}
            if stats is None else stats, "config": {}, "step": details}


HOSTILE_STEPS = [  # (the step line, the warning after FILE:LINE:, or None where it is usable)
    (_step(stats={"step": {"n": 3, "median": _NAN, "ci_low": _NAN, "ci_high": _INF}}), None),
    (_step(stats={"step": {"n": 3, "median": 1e308, "ci_low": -1e308, "ci_high": 1e308}}),
     None),
    (_step(stats={"step": {"n": 1e300, "median": -5.0}}), None),
    (_step(stats={"step": {"n": 3, "median": 1e-320, "ci_low": 0, "ci_high": 1e-319}}), None),
    (_step(metric={"step": {"measure.time": [_NAN, _INF, -_INF]}}), None),
    (_step(configs={"aten::mm|0|0|0": {"in_step_us": 1e308, "calls": 2**53}}), None),
    (_step(real_step_us=_NAN, real_host_us=_INF,
           original={"total_us": {"cpu": _NAN, "device": _INF}}), None),
    (_step(stats={"step": {"n": 3, "median": "5"}}),
     "step record's stats.step.median is not a number"),
    (_step(stats={"step": {"n": 3, "median": 2**64}}),
     "step record's stats.step.median is not a number"),
    (_step(metric={"step": {"measure.time": ["NaN"]}}),
     "step record's metric.step.measure.time is not a list of numbers"),
    (_step(real_step_us="NaN"), "step record's step.real_step_us is not a number"),
    (_step(calls=2**64), "step record's step.calls is not a whole number from 0 to "),
    (_step(configs=["x"]), "step record's step.configs is not an object"),
    (_step(host_gaps={"kept": "yes"}), "step record's step.host_gaps.kept is not true/false"),
]


def test_hostile_step_lines_in_every_tool(tmp_path):
    """Wrong types, huge numbers, NaN and its look-alikes in a step line (issue 31): each tool
    warns FILE:LINE for a line it cannot use, and takes no NaN, infinity or absurd time from
    one it can: nothing printed as "nan", "inf" or a 300-digit number, no history point."""
    import re

    absurd = dict(record(1, 1e300), count=2**53)
    for index, (line, said) in enumerate(HOSTILE_STEPS):
        path = write_lines(tmp_path / f"s{index}.json", HEADER, record(0), absurd, line,
                           {"finish_time": "t"})
        db = tmp_path / f"h{index}.db"
        outputs = []
        for module, args in (("param_compute.workload_totals", [path]),
                             ("param_compute.workload_totals", ["--json", path]),
                             ("param_compute.analysis.report",
                              [path, "-o", tmp_path / f"s{index}.html"]),
                             ("param_compute.analysis.compare", [path, path]),
                             ("param_compute.cli.history", ["add", path, "--label", "v",
                                                            "--db", db]),
                             ("param_compute.cli.history", ["show", "--db", db])):
            done = run_cli(*args, module=module)
            assert done.returncode == 0, (index, module, done.stderr)
            assert "Traceback" not in done.stderr, (index, module, done.stderr)
            if "show" not in args:  # the database holds no lines: show has none to warn
                warned = re.search(rf"warning: {re.escape(str(path))}:4: .*\(line not used\)",
                                   done.stderr)
                assert bool(warned) == (said is not None), (index, module, done.stderr)
                assert said is None or f"{path}:4: {said}" in done.stderr
            outputs.append(done.stdout)
        outputs.append((tmp_path / f"s{index}.html").read_text())
        for text in outputs:
            text = text.replace(str(tmp_path), "")
            assert not re.search(r"\b(nan|NaN|inf|Infinity)\b|\d{25}", text), (index, text)
        import sqlite3

        with sqlite3.connect(db) as connection:
            medians = [row[0] for row in connection.execute("SELECT median FROM points")]
        connection.close()
        assert all(0 < m <= 1e15 for m in medians), (index, medians)
