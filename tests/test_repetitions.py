"""``--repetitions N``: the plan measured N times in fresh processes, each in a seeded random
order; one record per run with the median of repetition medians and their interval."""

from __future__ import annotations

import json
import logging
import os
import signal
import statistics

import pytest

from conftest import EXAMPLES, run_cli
from param_compute.plan.runplan import PlannedRun
from param_compute.process.signals import GUARD, Interrupted
from param_compute.results.file import read_results
from param_compute.results.resume import scan_results
from param_compute.results.records import STATUS_ERROR, PassResult, RunError, RunRecord
from param_compute.results.stats import across_repetitions, summarize
from param_compute.results.combine import combine
from param_compute.runtime.repetitions import RepeatedExecutor, repetition_order


def _runs(count):
    return [PlannedRun("torch.add", 0, 0, "0", None, str(i), {"args": []})
            for i in range(count)]


def test_repetitions_3_records_three_repetition_medians(tmp_path):
    out = tmp_path / "rep.json"
    result = run_cli("-c", EXAMPLES / "matmul_sweep.json", "--only", "torch.mm", "-k", "64x",
                     "--repetitions", "3", "-i", "4", "--no-throughput", "--output", out)
    assert result.returncode == 0, result.stderr
    results = read_results(out)
    assert not results.problems
    assert results.header["run_options"]["repetitions"] == 3
    assert [(r["op_name"], r["id"]) for r in results.records] == [
        ("torch.mm", "0|0|0_0"), ("torch.mm", "0|0|0_1")]  # one record per run
    for record in results.records:
        stats = record["stats"]["forward"]
        medians = stats["repetition_medians"]
        assert len(medians) == 3
        times = record["metric"]["forward"]["measure.time"]
        assert len(times) == 12 and stats["n"] == 12  # every repetition's samples
        # each repetition median is the median of one repetition's 4 samples
        assert sorted(statistics.median(times[i:i + 4]) for i in (0, 4, 8)) == \
            pytest.approx(sorted(medians))
        assert stats["median"] == pytest.approx(statistics.median(medians))
        assert (stats["ci_low"], stats["ci_high"]) == (min(medians), max(medians))
    assert "repetition 3 of 3" in result.stderr


def test_orders_differ_across_repetitions_and_are_reproducible():
    runs = _runs(12)
    orders = [[r.input_id for r in repetition_order(runs, 0, rep)] for rep in range(3)]
    assert len({tuple(o) for o in orders}) == 3
    assert all(sorted(o, key=int) == [str(i) for i in range(12)] for o in orders)
    assert orders == [[r.input_id for r in repetition_order(runs, 0, rep)] for rep in range(3)]
    assert orders[0] != [r.input_id for r in repetition_order(runs, 1, 0)]  # --seed changes it


class _FakeExecutor:
    """Times a run as 1 ms per position in its repetition's order (pid-free, deterministic)."""

    made = []

    def __init__(self):
        self.order, self.closed = [], False
        _FakeExecutor.made.append(self)

    def execute(self, run):
        self.order.append(run.key)
        value = float(len(self.order) + len(_FakeExecutor.made))
        return RunRecord(run.op_name, run.id, run.config(),
                         passes=[PassResult("forward", [9.0], [value, value + 2.0])])

    def close(self):
        self.closed = True


def test_each_repetition_gets_a_fresh_executor_in_its_seeded_order():
    _FakeExecutor.made = []
    runs = _runs(6)
    repeated = RepeatedExecutor(_FakeExecutor, runs, 3, seed=7)
    records = [repeated.execute(run) for run in runs]
    made = _FakeExecutor.made
    assert len(made) == 3 and all(e.closed for e in made)  # one process per repetition
    assert [e.order for e in made] == repeated.orders
    assert repeated.orders == [[r.key for r in repetition_order(runs, 7, rep)] for rep in range(3)]
    again = RepeatedExecutor(_FakeExecutor, runs, 3, seed=7)
    again.measure()
    assert again.orders == repeated.orders
    for run, record in zip(runs, records):
        expected = [made[rep].order.index(run.key) + 3 + rep for rep in range(3)]
        assert record.repetition_medians == {"forward": expected}
        assert record.passes[0].warmup_ms == [9.0, 9.0, 9.0]
        assert record.to_json()["stats"]["forward"]["median"] == statistics.median(expected)


def test_a_failure_in_any_repetition_is_the_run_s_record():
    ok = RunRecord("torch.add", "0|0|0", {}, passes=[PassResult("forward", [], [1.0])])
    failed = RunRecord("torch.add", "0|0|0", {}, STATUS_ERROR,
                       error=RunError("WorkerLost", "crashed: signal 11 (SIGSEGV)", "run"))
    combined = combine([ok, failed, ok])
    assert combined.status == STATUS_ERROR
    assert combined.error.message == "repetition 2 of 3: crashed: signal 11 (SIGSEGV)"


def test_stats_across_repetitions_take_median_and_interval_over_repetition_medians():
    pooled = summarize([1.0, 1.1, 2.0, 2.1, 3.0, 3.3])
    stats = across_repetitions(pooled, [3.0, 1.0, 2.0])
    assert stats["median"] == 2.0 and stats["repetition_medians"] == [3.0, 1.0, 2.0]
    assert (stats["ci_low"], stats["ci_high"], stats["ci_rel_width"]) == (1.0, 3.0, 1.0)
    assert stats["n"] == 6 and stats["min"] == 1.0  # the pooled sample's


def test_bad_repetitions_are_refused(tmp_path):
    result = run_cli("-c", EXAMPLES / "simple_add.json", "--repetitions", "0",
                     "--output", tmp_path / "r.json")
    assert result.returncode == 2
    assert "--repetitions must be >= 1, got 0" in result.stderr
    assert not os.path.exists(tmp_path / "r.json")


class _StoppedExecutor(_FakeExecutor):
    """The second repetition's process is stopped by SIGTERM at its third run."""

    def execute(self, run):
        if len(_FakeExecutor.made) == 2 and len(self.order) == 2:
            raise Interrupted(signal.SIGTERM)
        return super().execute(run)


def test_an_interrupt_writes_the_runs_measured_so_far_then_stops():
    _FakeExecutor.made = []
    runs = _runs(4)
    repeated = RepeatedExecutor(_StoppedExecutor, runs, 3, seed=0)
    try:
        records = [repeated.execute(run) for run in runs]  # every run was measured once
        assert all(made.closed for made in _FakeExecutor.made)
        assert len(_FakeExecutor.made) == 2  # the third repetition never started
        counts = [len(r.repetition_medians["forward"]) for r in records]
        assert sorted(counts) == [1, 1, 2, 2]  # 2 runs reached in repetition 2
        with pytest.raises(Interrupted) as stopped:  # after the last record's line
            with GUARD.critical():
                pass
        assert stopped.value.signum == signal.SIGTERM
    finally:
        GUARD.stopping = False


def test_an_interrupt_skips_the_runs_never_measured_and_writes_every_measured_one():
    _FakeExecutor.made = []

    class StoppedFirst(_FakeExecutor):
        def execute(self, run):
            if len(self.order) == 2:
                raise KeyboardInterrupt
            return super().execute(run)

    runs = _runs(4)
    repeated = RepeatedExecutor(StoppedFirst, runs, 3, seed=0)
    measured = {r.key for r in repetition_order(runs, 0, 0)[:2]}  # before the Ctrl-C
    outcomes = []
    try:
        for run in runs:
            record = repeated.execute(run)
            outcomes.append(None if record is None else run.key)
            with GUARD.critical():  # the results line of this run
                pass
    except Interrupted as stop:
        assert stop.signum == signal.SIGINT
        outcomes.append("stop")
    finally:
        GUARD.stopping = False
    last = max(i for i, r in enumerate(runs) if r.key in measured)
    # plan order: measured runs written, never-measured ones skipped, the stop after the last
    assert outcomes == [r.key if r.key in measured else None for r in runs[:last + 1]] + ["stop"]


def test_an_interrupt_before_any_run_was_measured_stops_at_once():
    _FakeExecutor.made = []

    class StoppedAtOnce(_FakeExecutor):
        def execute(self, run):
            raise KeyboardInterrupt

    repeated = RepeatedExecutor(StoppedAtOnce, _runs(3), 2, seed=0)
    with pytest.raises(KeyboardInterrupt):
        repeated.execute(_runs(3)[0])


def test_one_repetition_keeps_the_sample_s_own_interval():
    pooled = summarize([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0])
    assert across_repetitions(pooled, [4.0]) == dict(pooled, repetition_medians=[4.0])


def test_combine_counts_every_sample_and_pools_the_facts_of_thinned_repetitions():
    def record(times, descheduled, switches, drift):
        one = PassResult("forward", [], list(times),
                         facts={"descheduled": descheduled, "involuntary_switches": switches,
                                "stop_reason": "min_time"})
        one.keep_at_most(10)
        return RunRecord("torch.add", "0|0|0", {}, passes=[one], canary_drift=drift)

    combined = combine([record([1.0] * 100, 0.1, 3, None), record([2.0] * 50, 0.4, 5, 0.3)])
    stats = combined.to_json()["stats"]["forward"]
    assert stats["n"] == 150 and stats["kept"] == 20  # 100 + 50 measured, 10 + 10 kept
    assert stats["repetition_medians"] == [1.0, 2.0]
    assert stats["descheduled"] == 0.4 and stats["involuntary_switches"] == 8
    assert stats["stop_reason"] == "min_time"
    assert combined.canary_drift == 0.3 and combined.to_json()["disturbed"] is True


def test_combined_repetitions_keep_at_most_keep_samples():
    def record(times):
        one = PassResult("forward", [], list(times), extra={"measure.cpu_time": list(times)})
        return RunRecord("torch.add", "0|0|0", {}, passes=[one])

    reps = [record([float(r)] * 5) for r in (1, 2, 3)]
    combined = combine(reps, keep=2).to_json()
    assert combined["metric"]["forward"]["measure.time"] == [1.0, 3.0]
    assert combined["metric"]["forward"]["measure.cpu_time"] == [1.0, 3.0]
    stats = combined["stats"]["forward"]
    assert (stats["n"], stats["kept"], stats["repetition_medians"]) == (15, 2, [1.0, 2.0, 3.0])
    assert len(combine(reps).to_json()["metric"]["forward"]["measure.time"]) == 15


class _FakeCanary:
    """Readings in the parent: the baseline, then one per repetition boundary; the reading
    after repetition 2 (the third check) lies 40% out."""

    def __init__(self):
        self.baseline, self.checks = None, 0

    def start(self):
        self.baseline = 1.0

    def check(self):
        self.checks += 1
        return 0.4 if self.checks == 3 else None


def test_a_canary_read_around_each_repetition_marks_the_one_it_saw_drift():
    _FakeExecutor.made = []
    runs = _runs(3)
    canary = _FakeCanary()
    repeated = RepeatedExecutor(_FakeExecutor, runs, 3, seed=0, canary=canary)
    records = [repeated.execute(run) for run in runs]
    # before 1 (baseline), after 1, before 2, after 2 (drifted), before 3, after 3
    assert canary.checks == 5
    assert repeated.repetition_drifts == [None, 0.4, None]
    for run, record in zip(runs, records):
        assert [r.canary_drift for r in repeated.records[run.key]] == [None, 0.4, None]
        assert record.canary_drift == 0.4 and record.disturbed()


def test_without_a_canary_no_record_is_marked():
    _FakeExecutor.made = []
    runs = _runs(2)
    repeated = RepeatedExecutor(_FakeExecutor, runs, 2, seed=0)
    records = [repeated.execute(run) for run in runs]
    assert repeated.repetition_drifts == [None, None]
    assert all(r.canary_drift is None for r in records)


def test_resuming_runs_measured_in_fewer_repetitions_says_so(tmp_path, caplog):
    path = tmp_path / "r.json"
    record = {"op_name": "torch.add", "id": "0|0|0", "status": "ok",
              "stats": {"forward": {"median": 1.0, "repetition_medians": [1.0]}}}
    whole = dict(record, id="1|0|0",
                 stats={"forward": {"median": 1.0, "repetition_medians": [1.0, 1.1]}})
    path.write_text("\n".join(json.dumps(line) for line in (
        {"run_options": {"spec_sha256": "d", "repetitions": 2}, "sys_info": {}},
        record, whole)) + "\n")
    state = scan_results(path)
    with caplog.at_level(logging.WARNING, logger="param_compute"):
        state.check_matches("d", False, {"repetitions": 2})
    assert [r.getMessage() for r in caplog.records] == [
        f"resuming {path}: 1 run(s) there were measured in fewer than the 2 repetitions asked "
        "for (an interrupted run); kept as they are, not measured again (their "
        "repetition_medians say how many)"]
