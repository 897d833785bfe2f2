"""Measurements that know when they were disturbed (issue 23, item 1): thread CPU time beside
wall time, the descheduled fraction, --discard-disturbed, --timer cpu, the canary, the header."""

from __future__ import annotations

import dataclasses
import json

import pytest

import param_compute
import param_compute.runtime.executor as executor_module
import param_compute.measure.timing as timing
from conftest import run_cli, simple_op, tensor, write_spec
from param_compute.errors import OptionsError
from param_compute.results.file import read_results
from param_compute.results.file.schema import schema_problem
from param_compute.results.records import PassResult, RunRecord
from param_compute.results.stats import DESCHEDULED_SLACK, descheduled
from param_compute.measure import canary as canary_module
from param_compute.measure.canary import (BAND_MADS, BASELINE_READINGS, CALLS, COST_SHARE,
                                          MIN_BAND, Canary)
from param_compute.measure.clocks import TIMERS, pick_times, timer_refusal
from param_compute.measure.disturbance import involuntary_switches, judge
from param_compute.runtime.options import RunOptions
from param_compute.runtime.sysinfo import cpu_governor, sys_info
from param_compute.measure.timing import ExecMode, time_calls


class StepClock:
    """A host clock that advances ``step`` ms per stamp (``name`` host: CPU time is paired)."""

    name = "host"
    barrier = None

    def __init__(self, step=1.0):
        self.now, self.step = 0.0, step

    def stamp(self):
        self.now += self.step
        return self.now

    @staticmethod
    def elapsed_ms(start, end):
        return end - start

    def synchronize(self):
        pass


def test_cpu_time_is_read_outside_each_pair_of_stamps(monkeypatch):
    order = []
    clock = StepClock()
    original = clock.stamp
    clock.stamp = lambda: order.append("wall") or original()
    cpu_ns = iter(range(0, 10**9, 250_000))  # each read 0.25 ms later
    monkeypatch.setattr(timing, "thread_cpu_ns", lambda: order.append("cpu") or next(cpu_ns))
    cpu = []
    times = time_calls(lambda: order.append("call"), 3, clock, ExecMode.DISCRETE, cpu_out=cpu)
    assert order[:5] == ["cpu", "wall", "call", "wall", "cpu"]
    assert times == [1.0, 1.0, 1.0] and cpu == [0.25, 0.25, 0.25]
    # continuous: one CPU read per block boundary, a mean per call of each block
    cpu = []
    time_calls(lambda: None, 4, StepClock(), ExecMode.CONTINUOUS, cpu_out=cpu, blocks=2)
    assert cpu == [0.125, 0.125]
    # not asked: not read at all
    order.clear()
    time_calls(lambda: None, 2, StepClock(), ExecMode.DISCRETE)
    assert "cpu" not in order


def test_discard_disturbed_drops_the_waiting_samples_of_a_run(monkeypatch):
    # CPU time advances 1 ms per read: the sample's CPU time is 1 ms; the wall time is the
    # op's own (~µs): no sample waited, nothing dropped; with no CPU time every one did, and
    # dropping them all would leave nothing: kept, and the run is flagged.
    cpu_ns = iter(range(0, 10**12, 1_000_000))
    monkeypatch.setattr(timing, "thread_cpu_ns", lambda: next(cpu_ns))
    [record] = param_compute.run(_mm_spec(), iteration=6, discard_disturbed=True,
                                 canary=False).records
    stats = record["stats"]["forward"]
    assert (stats["descheduled"], stats["discarded"], stats["n"]) == (0.0, 0, 6)
    monkeypatch.setattr(timing, "thread_cpu_ns", lambda: 0)
    [record] = param_compute.run(_mm_spec(), iteration=6, discard_disturbed=True,
                                 canary=False).records
    stats = record["stats"]["forward"]
    assert (stats["descheduled"], stats["discarded"], stats["n"]) == (1.0, 0, 6)
    assert record["disturbed"] is True

    def every_other_waits():  # samples 0, 2, 4: 1 ms of CPU; 1, 3, 5: none (they waited)
        base, k = 0, 0
        while True:
            yield base
            yield base + (1_000_000 if k % 2 == 0 else 0)
            base, k = base + 10_000_000, k + 1

    reads = every_other_waits()
    monkeypatch.setattr(timing, "thread_cpu_ns", lambda: next(reads))
    [record] = param_compute.run(_mm_spec(), warmup=0, iteration=6, discard_disturbed=True,
                                 canary=False).records
    stats = record["stats"]["forward"]
    assert (stats["descheduled"], stats["discarded"], stats["n"]) == (0.5, 3, 3)
    assert record["metric"]["forward"]["measure.cpu_time"] == [1.0, 1.0, 1.0]
    assert record["disturbed"] is True  # half the samples waited: the run still says so


def test_descheduled_samples_and_discarding():
    wall = [1.0, 1.0 + DESCHEDULED_SLACK / 2, 2.0, 3.0]
    cpu = [1.0, 1.0, 1.0, 1.0]
    assert descheduled(wall, cpu) == [False, False, True, True]
    host = [5.0, 6.0, 7.0, 8.0]
    facts = judge(wall, cpu, discard=True, parallel=(host,))
    assert facts == {"descheduled": 0.5, "discarded": 2}
    assert wall == [1.0, 1.0 + DESCHEDULED_SLACK / 2] and cpu == [1.0, 1.0]
    assert host == [5.0, 6.0]
    # every sample descheduled: nothing would be left, so nothing is dropped
    wall, cpu = [2.0, 2.0], [1.0, 1.0]
    assert judge(wall, cpu, discard=True) == {"descheduled": 1.0, "discarded": 0}
    assert wall == [2.0, 2.0]
    assert judge([], [], discard=False) == {}
    switches = involuntary_switches()
    assert isinstance(switches, int) and switches >= 0


def _mm_spec(size=64):
    return simple_op("torch.mm", tensor(size, size), tensor(size, size))


def test_a_run_whose_thread_got_no_cpu_is_disturbed(monkeypatch, tmp_path):
    monkeypatch.setattr(timing, "thread_cpu_ns", lambda: 0)  # no CPU time: always waiting
    out = tmp_path / "r.json"
    result = param_compute.run(_mm_spec(), warmup=1, iteration=20, canary=False, output=out)
    [record] = result.records
    stats = record["stats"]["forward"]
    assert stats["descheduled"] == 1.0 and record["disturbed"] is True
    assert record["metric"]["forward"]["measure.cpu_time"] == [0.0] * 20
    assert isinstance(stats["involuntary_switches"], int)
    # the record reads back typed
    [read] = [r for r in read_results(out).records]
    assert read["disturbed"] is True and read["stats"]["forward"]["descheduled"] == 1.0


def test_an_undisturbed_run_carries_no_flag(monkeypatch):
    # CPU time advances as fast as the wall clock: nothing descheduled.
    monkeypatch.setattr(timing, "thread_cpu_ns", timing.time.perf_counter_ns)
    [record] = param_compute.run(_mm_spec(), warmup=1, iteration=20, canary=False).records
    assert record["stats"]["forward"]["descheduled"] == 0.0
    assert "disturbed" not in record


def test_console_says_disturbed(monkeypatch, tmp_path):
    monkeypatch.setattr(timing, "thread_cpu_ns", lambda: 0)
    spec = write_spec(tmp_path, _mm_spec())
    done = run_cli("-c", str(spec), "-i", "10", "--no-canary", "--output",
                   str(tmp_path / "r.json"))
    assert done.returncode == 0, done.stderr
    assert "disturbed" in done.stderr and "1 run(s) disturbed" in done.stderr


def test_timer_cpu_times_by_thread_cpu_time(monkeypatch):
    cpu_ns = iter(range(0, 10**12, 1_000_000))  # each read 1 ms of CPU later
    monkeypatch.setattr(timing, "thread_cpu_ns", lambda: next(cpu_ns))
    [record] = param_compute.run(_mm_spec(), warmup=1, iteration=5, timer="cpu",
                                 canary=False).records
    forward = record["metric"]["forward"]
    assert forward["measure.time"] == [1.0] * 5
    assert len(forward["measure.wall_time"]) == 5 and "measure.cpu_time" not in forward


def test_timer_cpu_is_refused_where_it_cannot_time():
    assert set(TIMERS) >= {"wall", "cpu"}
    with pytest.raises(OptionsError, match="cannot see work queued on a GPU"):
        RunOptions(device="cuda", timer="cpu").check()
    with pytest.raises(OptionsError, match="--num-threads 1"):
        RunOptions(num_threads=2, timer="cpu").check()
    assert "must be one of" in timer_refusal("sundial", "cpu", 1)
    with pytest.raises(OptionsError, match="--discard-disturbed .* --num-threads 1"):
        RunOptions(num_threads=2, discard_disturbed=True).check()
    with pytest.raises(OptionsError, match="--discard-disturbed"):
        RunOptions(device="cuda", discard_disturbed=True).check()
    assert pick_times("wall", [1.0], [0.5]) == ([1.0], "measure.cpu_time", [0.5])
    assert pick_times("wall", [1.0], []) == ([1.0], None, [])


def test_timer_cpu_refusal_on_the_command_line(tmp_path):
    spec = write_spec(tmp_path, _mm_spec())
    done = run_cli("-c", str(spec), "--timer", "cpu", "--num-threads", "2", "--output",
                   str(tmp_path / "r.json"))
    assert done.returncode == 2 and "--timer cpu" in done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "r.json").exists()


def test_the_new_options_travel_in_the_json_form():
    options = RunOptions(timer="cpu", discard_disturbed=True, canary=False, max_noise=1.5,
                         max_time=3.0, keep_samples=10)
    assert RunOptions.from_json(options.to_json()) == options


class FakeWork:
    """A canary workload and clock: each call lasts the next of ``costs`` (ms)."""

    def __init__(self, costs):
        self.costs = list(costs)
        self.ns = 0
        self.calls = 0

    def clock(self):
        return self.ns

    def now(self):
        return self.ns / 1e9

    def __call__(self):
        cost = self.costs[min(self.calls, len(self.costs) - 1)]
        self.calls += 1
        self.ns += int(cost * 1e6)


def test_canary_flags_runs_measured_while_it_drifted():
    work = FakeWork([0.05])
    canary = Canary(work, work.clock, work.now)
    started = canary.before()  # the baseline: warm-up then BASELINE_READINGS readings
    assert work.calls == 3 + BASELINE_READINGS * CALLS
    assert canary.baseline == pytest.approx(0.05) and canary.band == MIN_BAND
    assert canary.interval == pytest.approx(CALLS * 0.05e-3 / COST_SHARE)
    work.ns += int(canary.interval * 1e9) + 1000  # a config lasting one interval
    assert canary.after(started) is None  # a reading within the band
    # the machine slows down by half: the next config's readings drift
    work.costs = [0.075]
    work.calls = 0
    started = canary.before()  # no reading due yet (one was just taken)
    assert work.calls == 0
    work.ns += int(canary.interval * 1e9) + 1000
    assert canary.after(started) == pytest.approx(0.5)
    # the next, short config: its last reading before it drifted
    started = canary.before()
    assert canary.after(started) == pytest.approx(0.5)


def test_canary_band_follows_its_own_noise():
    costs = [0.05, 0.06, 0.04, 0.07, 0.03] * 100
    work = FakeWork(costs)
    canary = Canary(work, work.clock, work.now)
    canary.start()
    assert canary.band >= MIN_BAND and BAND_MADS > 0


def test_canary_drift_marks_the_record(monkeypatch):
    class Drifting:
        def before(self):
            return 0.0

        def after(self, started):
            return 0.42

    monkeypatch.setattr(executor_module, "Canary", Drifting)
    [record] = param_compute.run(_mm_spec(), iteration=3).records
    assert record["canary_drift"] == 0.42 and record["disturbed"] is True
    [record] = param_compute.run(_mm_spec(), iteration=3, canary=False).records
    assert "canary_drift" not in record


def test_the_real_canary_is_deterministic_and_takes_its_baseline():
    work = canary_module.matrix_product()
    first = work().clone()
    assert first.shape == (64, 64) and bool((work() == first).all())
    canary = Canary()
    canary.start()
    # no absolute time here (a loaded machine may take any time): a baseline, a band, a spacing
    assert canary.baseline > 0 and canary.band >= canary_module.MIN_BAND and canary.interval > 0


def test_header_has_load_average_and_governor(tmp_path):
    info = sys_info("cpu", include_torch=False)
    assert isinstance(info["load_average"], list) and len(info["load_average"]) == 3
    assert "cpu_governor" in info
    governor = tmp_path / "scaling_governor"
    governor.write_text("performance\n")
    assert cpu_governor(str(governor)) == "performance"
    assert cpu_governor(str(tmp_path / "absent")) is None
    governor.write_bytes(b"\x00\x01junk")
    assert cpu_governor(str(governor)) is None


def test_record_facts_round_trip_and_are_typed():
    record = RunRecord("torch.mm", "0|0|0", {}, passes=[PassResult(
        "forward", [1.0], [1.0, 2.0, 3.0], facts={"descheduled": 0.5, "stop_reason": "noise"})],
        canary_drift=0.3)
    again = RunRecord.from_fields(dataclasses.asdict(record))
    assert again.to_json() == record.to_json()
    line = json.loads(json.dumps(record.to_json()))
    assert schema_problem(line) is None
    assert line["stats"]["forward"]["stop_reason"] == "noise"
    assert schema_problem({**line, "canary_drift": "high"}) == \
        "run record's canary_drift is not a number"
    assert schema_problem({**line, "disturbed": "yes"}) == \
        "run record's disturbed is not true/false"
    bad = json.loads(json.dumps(line))
    bad["stats"]["forward"]["descheduled"] = "half"
    assert "is not a number" in schema_problem(bad)
