"""Every tool treats a results file as untrusted input: fuzzed files give exit 0/1/2, never a
traceback, and nothing is written outside the output directory."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from conftest import run_cli, simple_op, tensor, write_spec

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

HOSTILE_VALUES = [float("nan"), float("inf"), float("-inf"), 10**400 // 10**380, -1, 0, True,
                  None, "", "x" * 5000, [], {}, [1, "a", None], {"a": {"b": []}},
                  "/etc/passwd", 10**12, -10**12, 1e308, [[[[[]]]]], "../../x"]


@pytest.fixture(scope="module")
def good_lines(tmp_path_factory):
    """A real results file (2 runs, one failed, a backward pass), as parsed lines."""
    directory = tmp_path_factory.mktemp("good")
    spec = {**simple_op("torch.mm", tensor(4, 3), tensor(3, 2)),
            **simple_op("torch.sum", tensor(2, 2, dtype="long"))}
    out = directory / "r.json"
    run_cli("-c", write_spec(directory, spec), "--output", out, "-i", "4", "-b")
    return [json.loads(line) for line in out.read_text().splitlines()]


def _paths(value, prefix=()):
    """Every (path, value) inside a JSON value."""
    yield prefix, value
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _paths(item, prefix + (key,))
    elif isinstance(value, list):
        for index, item in enumerate(value[:8]):
            yield from _paths(item, prefix + (index,))


def _set(value, path, new):
    if not path:
        return new
    parent = value
    for step in path[:-1]:
        parent = parent[step]
    parent[path[-1]] = new
    return value


@st.composite
def mutated_files(draw, lines):
    """The good file's lines with a few mutations: hostile values at any path, keys dropped,
    lines duplicated, cut or replaced with garbage."""
    lines = json.loads(json.dumps(lines))
    texts = None
    for _ in range(draw(st.integers(1, 4))):
        index = draw(st.integers(0, len(lines) - 1))
        kind = draw(st.sampled_from(["value", "value", "drop", "duplicate", "garbage"]))
        if kind in ("value", "drop"):
            paths = list(_paths(lines[index]))
            path, _ = paths[draw(st.integers(0, len(paths) - 1))]
            if kind == "drop" and path:
                parent = lines[index]
                for step in path[:-1]:
                    parent = parent[step]
                del parent[path[-1]]
            else:
                lines[index] = _set(lines[index], path, draw(st.sampled_from(HOSTILE_VALUES)))
        elif kind == "duplicate":
            lines.insert(index, json.loads(json.dumps(lines[index])))
        else:
            texts = texts or {}
            texts[index] = draw(st.sampled_from(
                ['{"op_name": "x", "id": ', "[1, 2]", "null", "\x00\xff", '{"a": ' * 600,
                 "NaN", '{"op_name": "torch.mm", "id": "0|0|0", "status": "ok", '
                         '"metric": {"forward": {"measure.time": [NaN, Infinity]}}}']))
    out = []
    for i, line in enumerate(lines):
        if texts and i in texts:
            out.append(texts[i])
        else:
            out.append(json.dumps(line, allow_nan=True))
    if draw(st.booleans()):  # sometimes torn at the end
        out[-1] = out[-1][: max(1, len(out[-1]) // 2)]
        return "\n".join(out)
    return "\n".join(out) + "\n"


TOOLS = {
    "compare": lambda f, g, o: ("param_compute.analysis.compare", [g, f, "--csv", o / "c.csv",
                                                                  "--resamples", "50"]),
    "compare-self": lambda f, g, o: ("param_compute.analysis.compare", [f, f, "--strict"]),
    "report": lambda f, g, o: ("param_compute.analysis.report", [f, "-o", o / "r.html"]),
    "merge": lambda f, g, o: ("param_compute.analysis.merge", [f, g, "-o", o / "m.json",
                                                              "--partial"]),
    "export": lambda f, g, o: ("param_compute.results.sinks.export",
                               [f, "--csv", o / "x.csv", "--oss-json", o / "o.json"]),
    "totals": lambda f, g, o: ("param_compute.analysis.workload_totals", [f]),
    "ncu": lambda f, g, o: ("param_compute.profiling.ncu_report", [f, "--csv", o / "n.csv"]),
    "nsys": lambda f, g, o: ("param_compute.profiling.nsys_report", [f, "--csv", o / "s.csv"]),
}


def _snapshot(directory: Path):
    return {p: p.stat().st_mtime_ns for p in directory.rglob("*")}


def test_every_tool_survives_fuzzed_results_files(good_lines, tmp_path_factory):
    work = tmp_path_factory.mktemp("fuzz")
    good = work / "good.json"
    good.write_text("".join(json.dumps(line) + "\n" for line in good_lines))

    @settings(max_examples=12, deadline=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(mutated_files(good_lines))
    def check(text):
        target = work / "fuzzed.json"
        target.write_text(text, encoding="utf-8", errors="surrogateescape")
        outputs = work / "out"
        outputs.mkdir(exist_ok=True)
        before = {p: t for p, t in _snapshot(work).items() if p != outputs and outputs not in p.parents}
        for name, make in TOOLS.items():
            module, argv = make(target, good, outputs)
            result = run_cli(*argv, module=module)
            assert result.returncode in (0, 1, 2), (name, result.returncode, result.stderr)
            assert "Traceback" not in result.stderr, (name, result.stderr[-2000:])
            assert "internal error" not in result.stderr, (name, result.stderr[-500:])
        after = {p: t for p, t in _snapshot(work).items() if p != outputs and outputs not in p.parents}
        assert after == before  # only the output directory changed

    check()


@pytest.mark.parametrize("mutate, message", [
    (lambda lines: lines[:1] + [dict(lines[1], stats="x")] + lines[2:],
     "run record's stats is not an object"),
    (lambda lines: [dict(lines[0], run_options=7)] + lines[1:],
     "header's run_options is not an object"),
    (lambda lines: lines[:2] + [lines[1]] + lines[2:], "duplicate run torch.mm|"),
])
def test_unusable_lines_are_reported_with_file_and_line(good_lines, tmp_path, mutate, message):
    path = tmp_path / "r.json"
    path.write_text("".join(json.dumps(line) + "\n" for line in mutate(good_lines)))
    result = run_cli(path, "-o", tmp_path / "r.html", module="param_compute.analysis.report")
    assert result.returncode in (0, 2)
    assert message in result.stderr and f"{path}:" in result.stderr
    assert "Traceback" not in result.stderr


def test_non_finite_times_are_no_times(good_lines, tmp_path):
    lines = json.loads(json.dumps(good_lines))
    lines[1]["metric"]["forward"]["measure.time"] = [math.inf, -math.inf, math.nan]
    path = tmp_path / "r.json"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    good = tmp_path / "g.json"
    good.write_text("".join(json.dumps(line) + "\n" for line in good_lines))
    result = run_cli(good, path, module="param_compute.analysis.compare")
    assert result.returncode == 0, result.stderr
    assert "not judged: non-finite 1" in result.stdout
    gate = run_cli(good, path, "--fail-on-regression", "50",
                   module="param_compute.analysis.compare")
    assert gate.returncode == 1 and "(non-finite 1)" in gate.stdout


def test_compare_refuses_apples_to_oranges(good_lines, tmp_path):
    base = tmp_path / "base.json"
    base.write_text("".join(json.dumps(line) + "\n" for line in good_lines))
    lines = json.loads(json.dumps(good_lines))
    lines[1]["config"]["input"]["args"][0]["shape"] = [8, 3]  # another shape, same id
    changed = tmp_path / "changed.json"
    changed.write_text("".join(json.dumps(line) + "\n" for line in lines))
    result = run_cli(base, changed, module="param_compute.analysis.compare")
    assert result.returncode == 0
    assert "not compared (they measured different things): 2" in result.stdout
    assert "config differs (input)" in result.stdout
    strict = run_cli(base, changed, "--strict", module="param_compute.analysis.compare")
    assert strict.returncode == 2 and "config differs" in strict.stderr
    lines = json.loads(json.dumps(good_lines))
    lines[0]["run_options"]["num_threads"] = 2
    threads = tmp_path / "threads.json"
    threads.write_text("".join(json.dumps(line) + "\n" for line in lines))
    result = run_cli(base, threads, module="param_compute.analysis.compare")
    assert "settings differ: num_threads: 1 in BASE, 2 in NEW" in result.stdout
    assert "no run measured in both files" in result.stdout
    across = run_cli(base, threads, "--across-settings", module="param_compute.analysis.compare")
    assert "not compared" not in across.stdout and "geometric mean" in across.stdout
    assert run_cli(base, threads, "--strict",
                   module="param_compute.analysis.compare").returncode == 2


def test_nsys_report_writes_only_beside_the_results(good_lines, tmp_path, monkeypatch):
    from param_compute.profiling import nsys_report
    from param_compute.profiling.profiles import BatchRecord

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    report = elsewhere / "victim.nsys-rep"
    report.write_text("x")
    results_dir = tmp_path / "results"
    results_dir.mkdir()
    commands = []

    def fake_run(command, **kwargs):
        commands.append(command)
        Path(command[command.index("--output") + 1]).write_text("db")
        return type("Done", (), {"returncode": 0, "stdout": "", "stderr": ""})()

    monkeypatch.setattr(nsys_report.subprocess, "run", fake_run)
    monkeypatch.setattr("param_compute.profiling.nsight.find_binary", lambda *a: "nsys")
    batch = BatchRecord.__new__(BatchRecord)
    object.__setattr__(batch, "file", report)
    object.__setattr__(batch, "recorded_file", str(report))
    database = nsys_report.sqlite_for(batch, None, results_dir)
    assert database == results_dir / "victim.sqlite" and database.read_text() == "db"
    assert not (elsewhere / "victim.sqlite").exists()
    (results_dir / "planted.sqlite").symlink_to(tmp_path / "target")
    planted = elsewhere / "planted.nsys-rep"
    planted.write_text("x")
    object.__setattr__(batch, "file", planted)
    with pytest.raises(nsys_report.ExportError, match="not overwritten"):
        nsys_report.sqlite_for(batch, None, results_dir)
    assert not (tmp_path / "target").exists() and len(commands) == 1
