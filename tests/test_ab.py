"""``python -m param_compute.ab``: two setups in ABBA rounds, joined per side into ordinary
results files, compared with significance; bad side ARGS refused before anything runs."""

from __future__ import annotations

import signal
import sys

import pytest

from conftest import run_cli, start_cli, write_spec
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
    # issue 31: --alpha 2 was taken (an A/A then called different), --alpha nan ran every
    # round and then printed a traceback; compare refuses both
    (["--alpha", "2"], "--alpha must be between 0 and 1, got 2.0"),
    (["--alpha", "nan"], "--alpha must be between 0 and 1, got nan"),
    (["--alpha", "0"], "--alpha must be between 0 and 1, got 0.0"),
    (["--alpha", "inf"], "--alpha must be between 0 and 1, got inf"),
    (["--timeout", "0"], "--timeout must be a number of seconds > 0, got 0.0"),
    (["--timeout", "nan"], "--timeout must be a number of seconds > 0, got nan"),
])
def test_bad_arguments_are_refused_before_anything_runs(tmp_path, args, message):
    spec = write_spec(tmp_path, TINY)
    result = run_cli("-c", spec, "-o", tmp_path / "ab", *args, module=AB)
    assert result.returncode == 2
    assert message in result.stderr
    assert not (tmp_path / "ab").exists()


def test_alpha_is_refused_with_compare_s_rule():
    from param_compute.analysis.compare import main as compare

    import contextlib
    import io

    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        status = compare(["a.json", "b.json", "--alpha", "2"])
    assert status == 2 and err.getvalue() == "error: --alpha must be between 0 and 1, got 2.0\n"


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


def _script(path, body: str):
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


def test_a_side_killed_by_a_signal_is_named_and_its_results_kept(tmp_path):
    """A side killed by SIGABRT read "exited -6: some runs failed"."""
    spec = write_spec(tmp_path, TINY)
    aborting = _script(tmp_path / "aborting.sh", f'"{sys.executable}" "$@"\nkill -ABRT $$\n')
    out = tmp_path / "ab"
    done = run_cli("-c", spec, "--a", "-i 2", "--b", "-i 2", "--python-b", aborting, "-o", out,
                   "--rounds", "1", module=AB)
    assert done.returncode == 1, done.stderr
    assert "side B's round 1 was killed by SIGABRT: its results are kept as far as they go" \
        in done.stderr.splitlines()
    assert "-6" not in done.stderr
    assert read_results(out / "b.json").records  # joined and compared, as measured
    assert "B vs A:" in done.stdout


def test_a_side_killed_without_results_names_the_signal(tmp_path):
    spec = write_spec(tmp_path, TINY)
    crashing = _script(tmp_path / "crashing.sh", "echo 'about to crash' >&2\nkill -SEGV $$\n")
    done = run_cli("-c", spec, "--python-a", crashing, "-o", tmp_path / "ab", "--rounds", "1",
                   module=AB)
    assert done.returncode == 1
    assert done.stderr.splitlines()[-1] == (
        "error: side A's round 1 was killed by SIGSEGV without results: about to crash")


def _hanging(tmp_path):
    """A side that never ends, its child's pid in ``sleeper.pid``."""
    return _script(tmp_path / "hanging.sh",
                   f"sleep 3600 &\necho $! > {tmp_path / 'sleeper.pid'}\nwait\n")


def _gone(pid: int, seconds: float = 5.0) -> bool:
    import time

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat", "rb") as handle:
                stat = handle.read()
        except FileNotFoundError:
            return True
        if stat[stat.rfind(b")") + 2:].startswith(b"Z"):
            return True
        time.sleep(0.05)
    return False


def test_a_side_that_hangs_is_stopped_past_the_timeout(tmp_path):
    """A side that hangs held ab for ever: there was no timeout."""
    import time

    spec = write_spec(tmp_path, TINY)
    started = time.monotonic()
    done = run_cli("-c", spec, "--python-a", _hanging(tmp_path), "-o", tmp_path / "ab",
                   "--rounds", "1", "--timeout", "1", module=AB)
    assert done.returncode == 1
    assert time.monotonic() - started < 30
    assert done.stderr.splitlines()[-1] == (
        f"error: side A's round 1 ran past --timeout 1 s: stopped; the rounds measured so far "
        f"are in {tmp_path / 'ab' / 'rounds'} (not joined, not compared)")
    assert _gone(int((tmp_path / "sleeper.pid").read_text()))


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_to_ab_stops_the_side_s_whole_group(tmp_path, signum):
    """SIGTERM killed ab at once (exit -15, not a word) and left the side running."""
    import time

    spec = write_spec(tmp_path, TINY)
    process = start_cli("-c", spec, "--python-a", _hanging(tmp_path), "-o", tmp_path / "ab",
                        "--rounds", "1", module=AB)
    deadline = time.monotonic() + 60
    while not (tmp_path / "sleeper.pid").exists() and time.monotonic() < deadline:
        assert process.poll() is None, process.stderr_text()
        time.sleep(0.05)
    time.sleep(0.1)
    process.send_signal(signum)
    _, stderr = process.communicate(timeout=30)
    assert process.returncode == 128 + signum
    assert stderr.splitlines()[-1] == (
        f"interrupted by {signal.Signals(signum).name}: the rounds measured so far are in "
        f"{tmp_path / 'ab' / 'rounds'} (not joined, not compared)")
    assert _gone(int((tmp_path / "sleeper.pid").read_text()))
