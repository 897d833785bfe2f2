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
from param_compute.runtime.repetition_journal import (RepetitionJournal, journal_path,
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
