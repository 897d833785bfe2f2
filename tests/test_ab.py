"""``python -m param_compute.ab``: two setups in ABBA rounds, joined per side into ordinary
results files, compared with significance; bad side ARGS refused before anything runs."""

from __future__ import annotations

import sys

import pytest

from conftest import run_cli, write_spec
from param_compute.cli.ab import round_plan
from param_compute.analysis.comparison import compare_files
from param_compute.results.file import read_results, write_results
from param_compute.analysis.rounds import join_records
from param_compute.analysis.significance import compare_samples

AB = "param_compute.cli.ab"
TINY = {"torch.add": {
    "input_iterator": "RangeConfigIterator",
    "input_data_generator": "PyTorch:DefaultDataGenerator",
    "config": [{"input": [{"args": [
        {"type": "tensor", "dtype": "float", "shape": [[16, 32, 16], 16], "__range__": ["shape"]},
        {"type": "tensor", "dtype": "float", "shape": [-1, 16],
         "__copy__": [{"shape": [0, [0, 0]]}]}]}]}]}}


def test_ab_writes_both_sides_and_prints_the_compare_table(tmp_path, monkeypatch):
    monkeypatch.setenv("COLUMNS", "160")  # room for the config column's whole labels
    spec = write_spec(tmp_path, TINY)
    out = tmp_path / "ab"
    result = run_cli("-c", spec, "--a", "-i 5 --no-throughput", "--b", "--no-throughput -i 5",
                     "--python-b", sys.executable, "-o", out, "--rounds", "2", module=AB)
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in (out / "rounds").iterdir()) == [
        "a1.json", "a2.json", "b1.json", "b2.json"]
    # ABBA: A first in round 1, B first in round 2
    assert [line for line in result.stderr.splitlines() if line.startswith("round")] == [
        "round 1: side A", "round 1: side B", "round 2: side B", "round 2: side A"]
    for side, args in (("a", ["-i", "5", "--no-throughput"]),
                       ("b", ["--no-throughput", "-i", "5"])):
        results = read_results(out / f"{side}.json")
        assert not results.problems
        assert results.header["ab"]["side"] == side and results.header["ab"]["args"] == args
        assert results.header["run_options"]["iteration"] == 5
        assert results.finish["rounds"] == 2 and results.finish["runs_ok"] == 2
        assert [r["id"] for r in results.records] == ["0|0|0_0", "0|0|0_1"]
        for record in results.records:  # both rounds' samples, a median per round
            assert len(record["metric"]["forward"]["measure.time"]) == 10
            assert len(record["stats"]["forward"]["repetition_medians"]) == 2
    assert "b.json vs" in result.stdout  # the compare table's title: B against A
    assert "│ torch.add │ 0|0|0_0 │ 16×16·16×16 f32 │ forward │" in result.stdout, result.stdout
    assert "geometric mean speedup" in result.stdout
    assert "B vs A: 0 faster, 0 slower, 2 same (2 rounds;" in result.stdout
    assert "2 rounds: fewer than 4 processes a side never make a change significant" \
        in result.stdout


@pytest.mark.parametrize("args, message", [
    (["--b", "--bogus"], "--b '--bogus': unrecognized arguments: --bogus"),
    (["--a", "-o x"], "--a '-o x': -o/--output-prefix (ab writes DIR/a.json and DIR/b.json) "
                      "is not allowed in a side's ARGS"),
    (["--b", "--output r.json"], "--output (ab writes DIR/a.json and DIR/b.json) is not "
                                 "allowed"),
    (["--a", "--seed 4"], "--seed (both sides use ab's --seed) is not allowed"),
    (["--a", "--num-threads 0"], "--a '--num-threads 0': --num-threads must be >= 1, got 0"),
    (["--a", "-i 'x"], "--a \"-i 'x\": No closing quotation"),
    (["--python-a", "/no/such/python"], "--python-a /no/such/python: not an executable file"),
    (["--rounds", "0"], "--rounds must be >= 1, got 0"),
    (["-c", "."], "-c .: not a regular file"),
])
def test_bad_arguments_are_refused_before_anything_runs(tmp_path, args, message):
    spec = write_spec(tmp_path, TINY)
    result = run_cli("-c", spec, "-o", tmp_path / "ab", *args, module=AB)
    assert result.returncode == 2
    assert message in result.stderr
    assert not (tmp_path / "ab").exists()


def test_round_plan_alternates_abba():
    assert round_plan(1) == [("a", 1), ("b", 1)]
    assert round_plan(3) == [("a", 1), ("b", 1), ("b", 2), ("a", 2), ("a", 3), ("b", 3)]


def _record(times, status="ok", **extra):
    return {"op_name": "torch.add", "id": "0|0|0", "status": status,
            "metric": {"forward": {"measure.time": times, "measure.iterations": [len(times)]}},
            "stats": {"forward": {"median": sorted(times)[len(times) // 2] if times else None}},
            "throughput": {"forward": {"flops": 10, "bytes": 4_000_000, "gb_per_s": 4.0}},
            **extra}


def test_join_records_pools_samples_and_takes_the_median_across_rounds():
    joined = join_records([_record([1.0, 1.0, 1.0]), _record([3.0, 3.0, 3.0]),
                           _record([2.0, 2.0, 2.0])])
    forward = joined["metric"]["forward"]
    assert forward["measure.time"] == [1.0] * 3 + [3.0] * 3 + [2.0] * 3
    assert forward["measure.iterations"] == [9]
    stats = joined["stats"]["forward"]
    assert stats["repetition_medians"] == [1.0, 3.0, 2.0] and stats["median"] == 2.0
    assert stats["n"] == 9 and (stats["ci_low"], stats["ci_high"]) == (1.0, 3.0)
    # the rate follows the median: round 1's 4 GB/s at 1 ms is 2 GB/s at 2 ms
    rates = joined["throughput"]["forward"]
    assert (rates["flops"], rates["bytes"], rates["gb_per_s"]) == (10, 4_000_000, 2.0)
    assert joined["noisy"] == ["forward"]  # the rounds disagree by far more than 10%


def test_join_records_keeps_a_failed_round_and_says_which():
    failed = _record([], status="error",
                     error={"type": "RuntimeError", "message": "boom", "phase": "forward"})
    joined = join_records([_record([1.0]), failed])
    assert joined["status"] == "error"
    assert joined["error"]["message"] == "round 2 of 2: boom"


def _side(path, medians_by_process, per_process=8):
    """A results file of one run whose samples come from processes with these medians."""
    times = [m + 0.001 * k for m in medians_by_process for k in range(per_process)]
    record = {"op_name": "torch.add", "id": "0|0|0", "status": "ok", "config": {},
              "metric": {"forward": {"measure.time": times}},
              "stats": {"forward": {"repetition_medians": medians_by_process}}}
    write_results(path, {"run_options": {}, "sys_info": {}}, [record], {"finish_time": "t"})
    return path


@pytest.mark.parametrize("base, new, verdict", [
    ([1.0, 1.0, 1.0, 1.3], [1.1, 1.1, 1.1, 1.4], "same"),  # processes overlap
    ([1.0, 1.0, 1.1, 1.1], [1.2, 1.2, 1.3, 1.3], "slower"),  # every B process slower
    ([1.0, 1.1], [1.5, 1.6], "same"),  # 2 processes a side: never significant
])
def test_compare_judges_samples_of_several_processes_between_processes(tmp_path, base, new,
                                                                        verdict):
    report = compare_files(_side(tmp_path / "a.json", base), _side(tmp_path / "b.json", new))
    (row,) = report.rows
    assert row.base_n == row.new_n == 8 * len(base)
    assert row.result.verdict == verdict
    # the pooled samples alone would call every one of these different
    pooled = [[m + 0.001 * k for m in side for k in range(8)] for side in (base, new)]
    assert compare_samples(*pooled).significant


def test_round_files_are_never_written_through_a_link_or_onto_the_spec(tmp_path):
    spec = write_spec(tmp_path, TINY)
    victims = tmp_path / "victims"
    victims.mkdir()
    (victims / "a1.json").write_text("precious\n")
    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / "rounds").symlink_to(victims)
    done = run_cli("-c", spec, "-o", linked, "--rounds", "1", module=AB)
    assert done.returncode == 2
    assert done.stderr == (f"error: {linked / 'rounds'}: is a symbolic link or no directory "
                           "(ab writes its round files there); remove it or choose another "
                           "-o DIR\n")
    planted = tmp_path / "planted"
    (planted / "rounds").mkdir(parents=True)
    (planted / "rounds" / "b1.json").symlink_to(victims / "a1.json")
    done = run_cli("-c", spec, "-o", planted, "--rounds", "1", module=AB)
    assert done.returncode == 2
    assert done.stderr.startswith(f"error: side B's round 1 {planted / 'rounds' / 'b1.json'}: "
                                  "is a symbolic link")
    inside = tmp_path / "inside"
    (inside / "rounds").mkdir(parents=True)
    own = inside / "rounds" / "a1.json"
    own.write_text(spec.read_text())
    done = run_cli("-c", own, "-o", inside, "--rounds", "1", module=AB)
    assert done.returncode == 2
    assert done.stderr == (f"error: side A's round 1 {own} is the spec file: writing it "
                           "would destroy the input; choose another output\n")
    assert (victims / "a1.json").read_text() == "precious\n"
    assert own.read_text() == spec.read_text()


def test_an_interrupted_side_stops_ab_and_keeps_what_was_measured(tmp_path):
    spec = write_spec(tmp_path, TINY)
    stopped = tmp_path / "stopped.sh"
    stopped.write_text("#!/bin/sh\nexit 130\n")
    stopped.chmod(0o755)
    out = tmp_path / "ab"
    out.mkdir()
    for side in "ab":  # an earlier ab's pair: gone, so it cannot pass for this run's
        (out / f"{side}.json").write_text("earlier\n")
    done = run_cli("-c", spec, "--a", "-i 2", "--b", "-i 2", "--python-b", stopped, "-o", out,
                   "--rounds", "2", module=AB)
    assert done.returncode == 130
    assert done.stderr.splitlines()[-2:] == [
        "side B's round 1 was interrupted (exit 130)",
        f"interrupted: the rounds measured so far are in {out / 'rounds'} (not joined, not "
        "compared)"]
    assert [p.name for p in (out / "rounds").iterdir()] == ["a1.json"]
    assert read_results(out / "rounds" / "a1.json").records
    assert not (out / "a.json").exists() and not (out / "b.json").exists()


def test_a_side_that_ends_without_results_is_exit_1_naming_it(tmp_path):
    spec = write_spec(tmp_path, TINY)
    silent = tmp_path / "not_python.sh"
    silent.write_text("#!/bin/sh\nexit 0\n")
    crashing = tmp_path / "crashing.sh"
    crashing.write_text("#!/bin/sh\necho 'Segmentation fault' >&2\nexit 139\n")
    for script, words in ((silent, "exited 0 without results: no output"),
                          (crashing, "exited 139 without results: Segmentation fault")):
        script.chmod(0o755)
        out = tmp_path / script.stem
        done = run_cli("-c", spec, "--a", "-i 2", "--python-b", script, "-o", out, "--rounds",
                       "1", module=AB)
        assert done.returncode == 1
        assert done.stderr.splitlines()[-1] == f"error: side B's round 1 {words}"
        assert read_results(out / "rounds" / "a1.json").records  # what A measured stays
