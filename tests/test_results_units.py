"""A results header's declared time unit is honoured or refused by the one typed reader.

A header declaring ``time_unit: "microsecond"`` was read as milliseconds: compare called the
same measurements a 1000x regression, the history stored them as ms (issue 31). Every tool
reads through ``results.file``: records arrive in ms whatever their run's header declares; an
unknown unit is refused naming the file and line.
"""

from __future__ import annotations

import json

import pytest

from conftest import EXAMPLES, read_results, run_cli
from param_compute.results.file import ResultsFileError, ResultsStream, read_results as read
from param_compute.results.file.units import MS_PER_UNIT, declared

TIMES = [1.0, 1.02, 0.99, 1.01, 1.03, 0.98, 1.0, 1.01]


def header(unit=None, where="run_options"):
    head = {"kind": "header", "format_version": 2,
            "run_options": {"device": "cpu", "num_threads": 1, "exec_mode": "discrete",
                            "config_file": "/x/spec.json"},
            "sys_info": {"hostname": "h1", "device": "cpu", "machine": "x86_64",
                         "pytorch_version": "2.13.0", "pytorch_num_threads": 1},
            "start_time": "2026-01-01T00:00:00"}
    if unit is not None:
        (head["run_options"] if where == "run_options" else head)["time_unit"] = unit
    return head


def record(i, times, scale=1.0, flops=2e6, nbytes=3e6):
    """A run measured at ``times`` ms, written in a unit ``scale`` ms long (its stats and rates
    computed in ms, as a writer in that unit would have them)."""
    ordered = sorted(times)
    median = ordered[len(ordered) // 2 - 1] / 2 + ordered[len(ordered) // 2] / 2
    stats = {"n": len(times), "median": median, "mean": sum(times) / len(times),
             "min": ordered[0], "max": ordered[-1], "p10": ordered[0], "p90": ordered[-1],
             "ci_low": ordered[1], "ci_high": ordered[-2], "cv": 0.02, "ci_rel_width": 0.05,
             "repetition_medians": [median, median]}
    in_unit = {k: ([v / scale for v in value] if isinstance(value, list) else value / scale)
               if k not in ("n", "cv", "ci_rel_width") else value for k, value in stats.items()}
    return {"kind": "run", "op_name": "torch.mm", "id": f"{i}|0|0", "status": "ok",
            "metric": {"forward": {"measure.time": [t / scale for t in times],
                                   "warmup.time": [times[0] / scale],
                                   "measure.cpu_time": [t / scale for t in times],
                                   "measure.iterations": [len(times)],
                                   "measure.gpu.memory": [0] * len(times)}},
            "stats": {"forward": in_unit},
            "throughput": {"forward": {"flops": flops, "bytes": nbytes,
                                       "tflops_per_s": flops / (median / 1e3) / 1e12,
                                       "gb_per_s": nbytes / (median / 1e3) / 1e9,
                                       "flops_util": 0.5, "bw_util": 0.25}},
            "config": {"build": None, "input": {"args": [
                {"type": "tensor", "dtype": "float", "shape": [64 + i, 64]}]}}}


def write(path, *lines):
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def pair(tmp_path, unit, scale):
    ms = write(tmp_path / "ms.json", header(), record(0, TIMES),
               record(1, [t * 3 for t in TIMES]), {"kind": "finish", "finish_time": "t"})
    other = write(tmp_path / f"{unit}.json", header(unit), record(0, TIMES, scale),
                  record(1, [t * 3 for t in TIMES], scale), {"kind": "finish", "finish_time": "t"})
    return ms, other


def test_the_same_measurements_in_microseconds_compare_as_no_change(tmp_path):
    base, new = pair(tmp_path, "microsecond", 1e-3)
    for first, second in ((base, new), (new, base)):
        done = run_cli(first, second, "--fail-on-regression", "5",
                       module="param_compute.analysis.compare")
        assert done.returncode == 0, done.stdout + done.stderr
        assert "regression gate passed" in done.stdout
        assert "same" in done.stdout and "│ slower" not in done.stdout
        assert "│ overall  │      2 │  1.000x │      0 │      0 │    2 │" in done.stdout
        assert "1000" not in done.stdout


@pytest.mark.parametrize("unit, scale", [
    ("microsecond", 1e-3), ("us", 1e-3), ("µs", 1e-3), ("μs", 1e-3), ("Microseconds", 1e-3),
    ("second", 1e3), ("s", 1e3), ("nanosecond", 1e-6), ("ns", 1e-6), ("millisecond", 1.0),
    ("ms", 1.0), (" MS ", 1.0)])
def test_every_unit_and_short_form_is_read_in_milliseconds(tmp_path, unit, scale):
    base, other = pair(tmp_path, "x", scale)
    other = write(tmp_path / "other.json", header(unit), record(0, TIMES, scale))
    assert declared(header(unit)) == scale
    expected = read(base).records[0]
    got = read(other)
    [record_] = got.records
    for name in ("measure.time", "warmup.time", "measure.cpu_time"):
        assert record_["metric"]["forward"][name] == pytest.approx(
            expected["metric"]["forward"][name])
    for name in ("measure.iterations", "measure.gpu.memory"):  # counts and bytes: no unit
        assert record_["metric"]["forward"][name] == expected["metric"]["forward"][name]
    stats, want = dict(record_["stats"]["forward"]), dict(expected["stats"]["forward"])
    assert stats.pop("repetition_medians") == pytest.approx(want.pop("repetition_medians"))
    assert stats == pytest.approx(want)
    assert record_["throughput"]["forward"] == pytest.approx(expected["throughput"]["forward"])
    if scale != 1.0:  # the header read says what it now holds, and what it declared
        assert got.header["run_options"]["time_unit"] == "millisecond"
        assert got.header["time_unit_read_from"] == unit


def test_rates_are_derived_again_from_the_times_in_milliseconds(tmp_path):
    """A writer in microseconds that computed its rates as if its times were ms: the rates
    read back follow the times, their fractions of peak in proportion."""
    line = record(0, TIMES, 1e-3)
    line["throughput"]["forward"].update(tflops_per_s=2.0, gb_per_s=3.0)  # 1000x too low
    path = write(tmp_path / "us.json", header("us"), line)
    rates = read(path).records[0]["throughput"]["forward"]
    assert rates["tflops_per_s"] == pytest.approx(2e6 / 1.005e-3 / 1e12)
    assert rates["gb_per_s"] == pytest.approx(3e6 / 1.005e-3 / 1e9)
    assert rates["flops_util"] == pytest.approx(0.5 * rates["tflops_per_s"] / 2.0)
    assert (rates["flops"], rates["bytes"]) == (2e6, 3e6)


def test_a_record_without_stats_has_them_computed_from_times_in_ms(tmp_path):
    """PARAM writes no stats: they are computed from the converted ``measure.time``."""
    from param_compute.results.fields import record_stats

    line = record(0, TIMES, 1e-3)
    del line["stats"], line["throughput"]
    path = write(tmp_path / "us.json", header("microsecond"), line)
    stats = record_stats(read(path).records[0])
    assert stats["forward"]["median"] == pytest.approx(1.005)


def test_the_history_stores_ms_and_every_tool_reads_the_same(tmp_path):
    base, other = pair(tmp_path, "microsecond", 1e-3)
    for path in (base, other):
        done = run_cli("add", path, "--label", path.stem, "--db", tmp_path / "h.db",
                       module="param_compute.cli.history")
        assert done.returncode == 0, done.stderr
    shown = run_cli("show", "--db", tmp_path / "h.db", module="param_compute.cli.history")
    assert "▁▁  ms … microsecond (2)  last 1.005 ms" in shown.stdout, shown.stdout
    assert "last 3.015 ms" in shown.stdout
    exported = {}
    for path in (base, other):
        out = tmp_path / f"{path.stem}.csv"
        assert run_cli(path, "--csv", out, module="param_compute.exporters").returncode == 0
        exported[path.stem] = out.read_text().splitlines()
    assert exported["ms"] == exported["microsecond"]
    pages = {}
    for path in (base, other):
        done = run_cli(path, "-o", tmp_path / f"{path.stem}.html",
                       module="param_compute.analysis.report")
        assert done.returncode == 0, done.stderr
        pages[path.stem] = (tmp_path / f"{path.stem}.html").read_text()
    assert "1.005 ms" in pages["microsecond"] and "1005" not in pages["microsecond"]


@pytest.mark.parametrize("head, said", [
    (header("fortnight"), "header's run_options.time_unit 'fortnight' is no time unit this "
                          "version reads (second, millisecond, microsecond, nanosecond, or s, "
                          "ms, us, ns): its times cannot be read"),
    (header("fortnight", where="top"), "header's time_unit 'fortnight' is no time unit"),
    (header(1000), "header's run_options.time_unit is not text (int)"),
    (header("\x1b[2Jms"), "header's run_options.time_unit '\\x1b[2Jms' is no time unit"),
    (dict(header("us"), time_unit="ms"), "header's time_unit and run_options.time_unit "
                                         "disagree: its times cannot be read"),
])
def test_an_unknown_unit_is_refused_naming_the_file_and_line(tmp_path, head, said):
    path = write(tmp_path / "r.json", head, record(0, TIMES), {"kind": "finish"})
    with pytest.raises(ResultsFileError, match="^" + str(path).replace(".", r"\.") + ":1: "):
        ResultsStream(path)
    for module, args in (("param_compute.analysis.compare", [path, path]),
                         ("param_compute.analysis.report", [path, "-o", tmp_path / "r.html"]),
                         ("param_compute.workload_totals", [path]),
                         ("param_compute.exporters", [path, "--csv", tmp_path / "r.csv"]),
                         ("param_compute.cli.history", ["add", path, "--label", "v", "--db",
                                                        tmp_path / "h.db"])):
        done = run_cli(*args, module=module)
        assert done.returncode == 2, (module, done.stdout, done.stderr)
        assert done.stderr.startswith(f"error: {path}:1: {said}"), (module, done.stderr)
        assert done.stderr.count("\n") == 1 and "\x1b" not in done.stderr
    assert not (tmp_path / "h.db").exists() and not (tmp_path / "r.html").exists()
    assert not (tmp_path / "r.csv").exists()


def test_an_appended_run_in_an_unknown_unit_is_left_out_line_by_line(tmp_path):
    """The first run reads; the appended one's header and records are unusable lines, each
    named (nothing written half from an output that stops midway)."""
    path = write(tmp_path / "r.json", header(), record(0, TIMES), {"kind": "finish"},
                 header("jiffies"), record(1, TIMES), record(2, TIMES), {"kind": "finish"},
                 header("us"), record(3, TIMES, 1e-3))
    got = read(path)
    assert [r["id"] for r in got.records] == ["0|0|0", "3|0|0"]
    assert got.records[1]["stats"]["forward"]["median"] == pytest.approx(1.005)
    assert [(p.line, p.reason[:60]) for p in got.problems] == [
        (4, "header's run_options.time_unit 'jiffies' is no time unit thi"),
        (5, "a record of the run whose header (line 4) declares a time un"),
        (6, "a record of the run whose header (line 4) declares a time un")]
    done = run_cli(path, path, module="param_compute.analysis.compare")
    assert done.returncode == 0
    assert f"warning: {path}:4: header's run_options.time_unit 'jiffies'" in done.stderr
    assert f"warning: {path}:6: a record of the run whose header (line 4)" in done.stderr


def test_shards_in_microseconds_merge_into_a_file_in_milliseconds(tmp_path):
    shards = []
    for index in range(2):
        head = header("microsecond")
        head["shard"] = {"index": index, "count": 2, "plan_digest": "d", "total_runs": 2,
                         "ops": ["torch.mm"]}
        shards.append(write(tmp_path / f"s{index}.json", head, record(index, TIMES, 1e-3),
                            {"kind": "finish", "finish_time": "t"}))
    out = tmp_path / "merged.json"
    done = run_cli("-o", out, *shards, module="param_compute.merge")
    assert done.returncode == 0, done.stderr
    head, records, _ = read_results(out)
    assert head["run_options"]["time_unit"] == "millisecond"
    assert [r["stats"]["forward"]["median"] for r in records] == pytest.approx([1.005, 1.005])
    again = read(out)  # read once more: milliseconds, not converted twice
    assert [r["metric"]["forward"]["measure.time"] for r in again.records] == \
        [pytest.approx(TIMES)] * 2


def test_resume_refuses_a_file_in_another_unit(tmp_path):
    out = tmp_path / "r.json"
    assert run_cli("-c", EXAMPLES / "simple_add.json", "-i", "2", "--output", out
                   ).returncode == 0
    lines = out.read_text().splitlines()
    head = json.loads(lines[0])
    head["run_options"]["time_unit"] = "us"
    out.write_text("\n".join([json.dumps(head)] + lines[1:]) + "\n")
    before = out.read_bytes()
    done = run_cli("-c", EXAMPLES / "simple_add.json", "-i", "2", "--output", out, "--resume")
    assert done.returncode == 2
    assert f"--resume: {out}: its last run's times are in 'us' (its header's time_unit); a " \
           "resumed run writes milliseconds: write to a new --output" in done.stderr
    assert out.read_bytes() == before


def test_every_name_of_a_unit_is_known():
    assert {MS_PER_UNIT[name] for name in ("s", "ms", "us", "ns")} == {1e3, 1.0, 1e-3, 1e-6}
