"""``--repetitions``: each measurement journaled as it comes; a killed run resumes without
measuring again what it had measured."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import EXAMPLES, REPO, run_cli
from param_compute.plan.runplan import PlannedRun
from param_compute.results.file import read_results
from param_compute.results.records import PassResult, RunRecord
from param_compute.runtime.repetition_journal import (SUFFIX, RepetitionJournal, journal_path,
                                                      parse_record)
from param_compute.runtime.repetitions import RepeatedExecutor


def _runs(count):
    return [PlannedRun("torch.add", 0, 0, "0", None, str(i), {"args": []})
            for i in range(count)]


class _Killed(Exception):
    """Stands for the process dying (nothing after it runs in the real case)."""


class _Counting:
    """A fresh executor per repetition; times are unique per call; dies after ``die_after``
    calls over all executors when set."""

    calls = []
    die_after = None

    def execute(self, run):
        if _Counting.die_after is not None and len(_Counting.calls) >= _Counting.die_after:
            raise _Killed()
        _Counting.calls.append(run.key)
        value = 1.0 + len(_Counting.calls) / 1000
        return RunRecord(run.op_name, run.id, run.config(),
                         passes=[PassResult("forward", [0.5], [value, value])])

    def close(self):
        pass


def test_a_killed_attempt_is_completed_without_measuring_again(tmp_path):
    results = tmp_path / "r.json"
    runs = _runs(4)
    _Counting.calls, _Counting.die_after = [], 6  # repetition 0 whole, 2 runs of repetition 1
    first = RepeatedExecutor(_Counting, runs, 3, seed=1, journal=RepetitionJournal(results,
                                                                                   False))
    with pytest.raises(_Killed):
        first.measure()
    lines = journal_path(results).read_text().splitlines()
    assert len(lines) == 4 + 1 + 2  # four measurements, repetition 0's end, two more
    assert json.loads(lines[4]) == {"repetition": 0, "end": True, "drift": None}
    before = {key: [r.passes[0].measure_ms[0] for r in records]
              for key, records in first.records.items()}

    _Counting.calls, _Counting.die_after = [], None
    journal = RepetitionJournal(results, resume=True)
    assert {rep: len(done) for rep, done in journal.done.items()} == {0: 4, 1: 2}
    second = RepeatedExecutor(_Counting, runs, 3, seed=1, journal=journal)
    records = [second.execute(run) for run in runs]
    assert len(_Counting.calls) == 2 + 4  # the rest of repetition 1, all of repetition 2
    for run, record in zip(runs, records):
        assert len(record.repetition_medians["forward"]) == 3
        samples = record.passes[0].measure_ms
        for value in before[run.key]:  # what the first attempt measured is kept as it was
            assert value in samples
    second.close()
    assert not journal_path(results).exists()  # every record handed out: the journal goes


def test_a_journal_is_kept_while_measured_records_were_not_handed_out(tmp_path):
    results = tmp_path / "r.json"
    runs = _runs(3)
    _Counting.calls, _Counting.die_after = [], None
    repeated = RepeatedExecutor(_Counting, runs, 2, seed=0,
                                journal=RepetitionJournal(results, False))
    repeated.execute(runs[0])  # measures everything, hands out one record
    repeated.close()
    assert journal_path(results).exists()


@pytest.mark.parametrize("damage, restored, words", [
    (lambda lines: lines[:2] + ["{not json"] + lines[2:], 2, "line 3: not a journal entry"),
    (lambda lines: lines[:-2] + [lines[-2][:40]], 7, "last line was cut off"),
    (lambda lines: [json.dumps({"repetition": 0, "run": "k", "record": {"op_name": 1}})]
     + lines, 0, "line 1: not a journal entry"),
    (lambda lines: [json.dumps({"repetition": -1, "end": True, "drift": None})] + lines, 0,
     "line 1"),
    (lambda lines: [json.dumps({"repetition": 0, "end": True, "drift": float("nan")})]
     + lines, 0, "line 1"),
])
def test_a_damaged_journal_is_read_up_to_the_damage(tmp_path, caplog, damage, restored, words):
    results = tmp_path / "r.json"
    runs = _runs(4)
    _Counting.calls, _Counting.die_after = [], None
    journal = RepetitionJournal(results, False)
    repeated = RepeatedExecutor(_Counting, runs, 2, seed=0, journal=journal)
    repeated.measure()
    journal.close(remove=False)
    path = journal_path(results)
    lines = path.read_text().splitlines()
    path.write_text("\n".join(damage(lines)) + "\n")
    if "cut off" in words:  # a kill in the middle of the last write: no newline at the end
        path.write_text(path.read_text().rstrip("\n"))
    with caplog.at_level(logging.WARNING, logger="param_compute"):
        again = RepetitionJournal(results, resume=True)
    assert sum(len(done) for done in again.done.values()) == restored
    assert any(words in r.getMessage() and str(path) in r.getMessage()
               for r in caplog.records), [r.getMessage() for r in caplog.records]


def test_hostile_journal_records_are_refused_field_by_field():
    good = dataclasses.asdict(RunRecord("torch.add", "0|0|0", {"input": {}},
                                        passes=[PassResult("forward", [1.0], [2.0])]))
    assert parse_record(good) is not None
    for change in ({"passes": [{"name": "forward", "warmup_ms": "x", "measure_ms": []}]},
                   {"passes": [dict(good["passes"][0], extra={"m": ["1"]})]},
                   {"passes": [dict(good["passes"][0], surprise=1)]},
                   {"config": []}, {"error": {"type": 1}}, {"canary_drift": float("inf")},
                   {"unknown_field": 1}, {"status": None}):
        assert parse_record(dict(good, **change)) is None, change


def test_a_planted_journal_link_is_refused(tmp_path):
    out = tmp_path / "r.json"
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    os.symlink(victim, journal_path(out))
    result = run_cli("-c", EXAMPLES / "matmul_sweep.json", "--only", "torch.mm",
                     "--repetitions", "2", "-i", "2", "--output", out)
    assert result.returncode == 2, result.stderr
    assert "--repetitions journal" in result.stderr and "link" in result.stderr
    assert victim.read_text() == "keep me\n"


def test_killed_run_with_repetitions_resumes_from_its_journal(tmp_path):
    out = tmp_path / "r.json"
    journal = journal_path(out)
    args = ["-c", str(EXAMPLES / "matmul_sweep.json"), "--only", "torch.mm",
            "--repetitions", "3", "-i", "40", "--no-throughput", "--output", str(out)]
    env = dict(os.environ, PYTHONPATH=str(REPO))
    child = subprocess.Popen([sys.executable, "-m", "param_compute.run_benchmark", *args,
                              "--no-progress"], cwd=REPO, env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and child.poll() is None:
        if journal.exists() and journal.read_text().count("\n") >= 3:
            break
        time.sleep(0.02)
    assert child.poll() is None, "the run ended before it could be killed"
    child.kill()
    child.wait()
    kept = [json.loads(line) for line in journal.read_text().splitlines()
            if line.endswith("}")]
    measured = {(e["repetition"], e["run"]): e["record"]["passes"][0]["measure_ms"]
                for e in kept if "record" in e}
    assert measured and not read_results(out).records  # nothing written but the journal
    result = run_cli(*args, "--resume")
    assert result.returncode == 0, result.stderr
    records = {f"{r['op_name']}|{r['id']}": r for r in read_results(out).records}
    assert len(records) == 8
    for (_, key), samples in measured.items():
        times = records[key]["metric"]["forward"]["measure.time"]
        assert all(value in times for value in samples)  # restored, not measured again
    assert all(len(r["stats"]["forward"]["repetition_medians"]) == 3 for r in records.values())
    assert not journal.exists()


def test_a_resumed_attempt_appends_after_the_last_whole_entry(tmp_path, caplog):
    """A line cut by the kill (or a damaged one) is dropped before the next attempt appends:
    what it measures is read back after a second kill, not hidden behind the bad line."""
    results = tmp_path / "r.json"
    runs = _runs(4)
    _Counting.calls, _Counting.die_after = [], 3
    with pytest.raises(_Killed):
        RepeatedExecutor(_Counting, runs, 3, seed=1,
                         journal=RepetitionJournal(results, False)).measure()
    path = journal_path(results)
    path.write_bytes(path.read_bytes() + b'{"repetition": 0, "ru')  # cut by the kill
    _Counting.calls, _Counting.die_after = [], 4
    with pytest.raises(_Killed):
        RepeatedExecutor(_Counting, runs, 3, seed=1,
                         journal=RepetitionJournal(results, True)).measure()
    assert b'"ru{' not in path.read_bytes()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="param_compute"):
        journal = RepetitionJournal(results, resume=True)
    assert sum(len(done) for done in journal.done.values()) == 3 + 4  # every measurement
    assert journal.drifts == {0: None}
    warned = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert not warned, warned


def _journal_line(**change):
    record = dataclasses.asdict(RunRecord("torch.add", "0|0|0", {"input": {}},
                                          passes=[PassResult("forward", [1.0], [2.0])]))
    record["passes"][0].update(change.pop("passed", {}))
    record.update(change.pop("record", {}))
    return json.dumps({"repetition": 0, "run": "torch.add|0|0|0", "record": record, **change})


def _second(line):
    """The line as repetition 1's (where the first line is repetition 0's)."""
    return json.dumps(dict(json.loads(line), repetition=1))


@pytest.mark.parametrize("line", [
    _journal_line(passed={"facts": {"involuntary_switches": "x"}}),  # summed as a number
    _journal_line(passed={"summary": {}}),  # no median
    _journal_line(passed={"summary": dict.fromkeys(
        ("n", "mean", "median", "min", "max", "stdev", "p10", "p90", "iqr", "cv", "ci_low",
         "ci_high", "ci_rel_width"), "1")}),
    _journal_line(record={"target": {"metric": 1, "value": "x"}}),
    _journal_line(record={"target": {"metric": "tflops_per_s", "value": 1}}),
    _journal_line(record={"op_name": "torch.evil"}),  # another run's record under this key
    _journal_line(run="torch.add|0|0|1"),
    _journal_line(record={"status": "planted"}),  # would fail the run as "planted"
    _journal_line(record={"passes": []}),  # ok, but measured nothing
])
def test_a_journal_record_that_would_break_the_run_is_refused(tmp_path, line):
    results = tmp_path / "r.json"
    journal_path(results).write_text(_journal_line() + "\n" + _second(line) + "\n")
    journal = RepetitionJournal(results, resume=True)
    assert list(journal.done) == [0] and list(journal.done[0]) == ["torch.add|0|0|0"]
    runs = _runs(2)
    _Counting.calls, _Counting.die_after = [], None
    repeated = RepeatedExecutor(_Counting, runs, 2, seed=0, journal=journal)
    records = [repeated.execute(run) for run in runs]
    assert [(r.op_name, r.id) for r in records] == [("torch.add", "0|0|0"), ("torch.add", "0|0|1")]
    assert len(_Counting.calls) == 3  # all but the restored measurement
    for run, record in zip(runs, records):
        assert record.config == run.config()  # the plan's, not the journal's ({"input": {}})
        record.to_json()


def test_a_full_disk_stops_the_journal_not_the_run(tmp_path, caplog, monkeypatch):
    import errno

    from param_compute.runtime import repetition_journal

    def full(fd, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(repetition_journal.os, "write", full)
    runs = _runs(3)
    _Counting.calls, _Counting.die_after = [], None
    repeated = RepeatedExecutor(_Counting, runs, 2, seed=0,
                                journal=RepetitionJournal(tmp_path / "r.json", False))
    with caplog.at_level(logging.WARNING, logger="param_compute"):
        records = [repeated.execute(run) for run in runs]
    assert all(len(r.passes[0].measure_ms) == 4 for r in records)  # nothing measured lost
    warned = [r.getMessage() for r in caplog.records if "cannot keep" in r.getMessage()]
    assert len(warned) == 1 and "No space left" in warned[0], warned


def test_a_fifo_planted_after_the_check_neither_hangs_nor_is_written(tmp_path, caplog):
    results = tmp_path / "r.json"
    os.mkfifo(journal_path(results))

    def hung(signum, frame):
        raise AssertionError("opening the journal blocked on a FIFO")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(10)
    try:
        journal = RepetitionJournal(results, resume=False)
        with caplog.at_level(logging.WARNING, logger="param_compute"):
            journal.measured(0, "torch.add|0|0|0", RunRecord("torch.add", "0|0|0", {}))
        journal.close(remove=True)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    assert any("cannot keep" in r.getMessage() for r in caplog.records)
    assert stat_is_fifo(journal_path(results))


def stat_is_fifo(path):
    import stat

    return stat.S_ISFIFO(os.lstat(path).st_mode)


def test_a_huge_journal_is_not_read(tmp_path, caplog):
    from param_compute.runtime.repetition_journal import MAX_BYTES

    results = tmp_path / "r.json"
    with open(journal_path(results), "wb") as sparse:
        sparse.truncate(MAX_BYTES + 1)  # a hole: takes no disk
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="param_compute"):
        journal = RepetitionJournal(results, resume=True)
    assert time.monotonic() - started < 5 and not journal.done
    assert any("over" in r.getMessage() and str(journal_path(results)) in r.getMessage()
               for r in caplog.records)


def test_discarded_results_keep_no_journal(monkeypatch):
    """``-o /dev/null``: no journal beside it (``/dev`` is no place for a file; a user who
    may not write there was refused the run)."""
    from param_compute.runtime import repetition_journal

    made = []
    monkeypatch.setattr(repetition_journal, "RepetitionJournal",
                        lambda *args, **kwargs: made.append(args))
    assert repetition_journal.journal_for(os.devnull) is None
    result = run_cli("-c", EXAMPLES / "matmul_sweep.json", "--only", "torch.mm",
                     "--repetitions", "2", "-i", "2", "--no-throughput", "--output", os.devnull)
    assert result.returncode == 0, result.stderr
    assert made == [] and not os.path.lexists(os.devnull + SUFFIX)


def test_a_fresh_run_stopped_before_measuring_keeps_an_earlier_runs_journal(tmp_path, caplog):
    """Without --resume the earlier journal is replaced once this run measures (said at the
    start); a run stopped before that leaves it for a --resume."""
    results = tmp_path / "r.json"
    earlier = _journal_line() + "\n"
    journal_path(results).write_text(earlier)
    with caplog.at_level(logging.WARNING, logger="param_compute"):
        journal = RepetitionJournal(results, resume=False)
    assert any("an earlier run's measurements" in r.getMessage()
               and str(journal_path(results)) in r.getMessage() for r in caplog.records)
    journal.close(remove=True)  # nothing measured: Ctrl-C before the first record
    assert journal_path(results).read_text() == earlier
    journal = RepetitionJournal(results, resume=False)
    journal.measured(0, "torch.add|0|0|0", RunRecord("torch.add", "0|0|0", {}))
    journal.close(remove=True)  # this run's journal, every record written: it goes
    assert not journal_path(results).exists()
