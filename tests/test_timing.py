"""The timing loop through the clock seam (a fake clock stands in for CUDA events), the
statistics, and the console progress/summary."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from param_compute.results.sinks.console import ConsoleReporter
from param_compute.results.sinks.base import RunSummary
from param_compute.plan.runplan import PlannedRun
from param_compute.results.records import PassResult, RunRecord
from param_compute.results.stats import quantile, summarize
from param_compute.measure.timing import ExecMode, HostClock, block_sizes, spent_ms, time_calls


class FakeClock:
    """Each stamp advances time by the cost of what ran since the previous stamp."""

    name = "fake"

    def __init__(self):
        self.now = 0.0
        self.log = []
        self.barrier = self._barrier

    def stamp(self):
        self.log.append("stamp")
        return self.now

    @staticmethod
    def elapsed_ms(start, end):
        return end - start

    def synchronize(self):
        self.log.append("sync")

    def _barrier(self):
        self.log.append("barrier")


def make_op(clock, costs):
    costs = iter(costs)

    def op():
        clock.log.append("call")
        clock.now += next(costs)

    return op


def test_discrete_times_each_call_alone_with_a_barrier_before_each():
    clock = FakeClock()
    times = time_calls(make_op(clock, [1.0, 2.0, 4.0]), 3, clock, ExecMode.DISCRETE)
    assert times == [1.0, 2.0, 4.0]
    assert clock.log == ["barrier", "stamp", "call", "stamp"] * 3 + ["sync"]


def test_continuous_stamps_block_boundaries_back_to_back_and_keeps_block_means():
    clock = FakeClock()
    times = time_calls(make_op(clock, [1.0, 2.0, 3.0, 6.0]), 4, clock, ExecMode.CONTINUOUS)
    assert times == [1.0, 2.0, 3.0, 6.0]  # fewer calls than blocks: one call per block
    assert clock.log == ["sync", "stamp"] + ["call", "stamp"] * 4 + ["sync"]
    clock = FakeClock()
    times = time_calls(make_op(clock, [1.0] * 50 + [3.0] * 50), 100, clock, ExecMode.CONTINUOUS)
    assert times == [1.0] * 5 + [3.0] * 5  # ten blocks of ten calls, each block's mean
    assert clock.log.count("sync") == 2 and clock.log.count("stamp") == 11  # no sync between
    assert block_sizes(23) == [3, 3, 3, 2, 2, 2, 2, 2, 2, 2] and block_sizes(3) == [1, 1, 1]
    assert spent_ms([2.0] * 3 + [1.0] * 7, 23, ExecMode.CONTINUOUS) == 2.0 * 9 + 1.0 * 14


def test_continuous_events_stamps_every_call_and_synchronizes_once():
    clock = FakeClock()
    times = time_calls(make_op(clock, [1.0, 5.0]), 2, clock, ExecMode.CONTINUOUS_EVENTS)
    assert times == [1.0, 5.0]
    assert "barrier" not in clock.log and clock.log.count("sync") == 1


def test_prepare_runs_untimed_before_each_iteration_or_once_in_continuous():
    for mode, expected_prepares in ((ExecMode.DISCRETE, 3), (ExecMode.CONTINUOUS, 1)):
        clock = FakeClock()
        prepares = []

        def prepare():
            prepares.append(1)
            clock.now += 100.0  # would dominate the times if it were timed

        times = time_calls(make_op(clock, [1.0] * 3), 3, clock, mode, prepare)
        assert len(prepares) == expected_prepares
        assert all(t == pytest.approx(1.0) for t in times)


def test_zero_iterations_time_nothing():
    clock = FakeClock()
    assert time_calls(make_op(clock, []), 0, clock, ExecMode.DISCRETE) == []
    assert clock.log == []


def test_host_clock_measures_real_time():
    import time

    times = time_calls(lambda: time.sleep(0.002), 3, HostClock(), ExecMode.DISCRETE)
    assert len(times) == 3 and all(1.9 <= t < 50 for t in times)


def test_summary_statistics():
    stats = summarize([4.0, 1.0, 3.0, 2.0, 5.0])
    assert stats["n"] == 5 and stats["mean"] == 3.0 and stats["median"] == 3.0
    assert stats["min"] == 1.0 and stats["max"] == 5.0
    assert stats["stdev"] == pytest.approx(1.5811388300841898)
    assert stats["p10"] == pytest.approx(1.4) and stats["p90"] == pytest.approx(4.6)
    assert stats["iqr"] == pytest.approx(2.0)
    assert stats["cv"] == pytest.approx(1.5811388300841898 / 3)
    assert summarize([]) is None
    assert summarize([2.5])["stdev"] == 0.0
    assert quantile([1.0, 2.0], 0.25) == pytest.approx(1.25)


def test_console_reporter_shows_progress_and_a_summary():
    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=True, width=120)
    reporter = ConsoleReporter("out.json", progress=True, console=console)
    reporter.start(2)
    run = PlannedRun("torch.add", 0, 0, "0", None, "0_1", {"args": []})
    record = RunRecord("torch.add", run.id, run.config(), passes=[
        PassResult("forward", [0.5], [0.010, 0.012, 0.011])])
    reporter.run_done(run, record)
    assert reporter.progress.tasks[0].completed == 1
    assert reporter.progress.tasks[0].description == "torch.add 0|0|0_1"
    summary = RunSummary(ok=1)
    reporter.finish(summary)
    text = buffer.getvalue()
    assert "torch.add" in text and "11.00 µs" in text and "results: out.json" in text


@pytest.mark.parametrize("mode", list(ExecMode))
def test_the_garbage_collector_is_paused_for_the_loop_and_left_as_found(mode):
    import gc

    seen = []
    assert gc.isenabled()
    assert len(time_calls(lambda: seen.append(gc.isenabled()), 12, HostClock, mode)) > 0
    assert seen == [False] * 12 and gc.isenabled()
    gc.disable()
    try:
        time_calls(lambda: seen.append(gc.isenabled()), 3, HostClock, mode)
        assert not gc.isenabled()  # a caller that paused it finds it paused
    finally:
        gc.enable()
    with pytest.raises(ZeroDivisionError):
        time_calls(lambda: 1 / 0, 2, HostClock, mode)
    assert gc.isenabled()  # restored when the op raises, too
