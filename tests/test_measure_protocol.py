"""The measuring protocol of issue 14: time-based warm-up, the median-interval noise rule,
continuous mode's blocks, and the summary's warning about too few values."""

from __future__ import annotations

import json
import random
import textwrap

import pytest

import param_compute
from conftest import run_cli, simple_op, tensor, write_spec
from param_compute.results.records import PassResult, RunRecord
from param_compute.results.stats import is_noisy, median_ci, median_ci_ranks, summarize
from param_compute.measure.timing import DRIFT_TOLERANCE, ExecMode, WARMUP_CAP, warm_up


class SettlingClock:
    """A host-like fake clock: each call costs ``cost(i)`` ms for the i-th call overall."""

    name = "settling"
    barrier = None

    def __init__(self, cost):
        self.now = 0.0
        self.calls = 0
        self.cost = cost

    def stamp(self):
        return self.now

    @staticmethod
    def elapsed_ms(start, end):
        return end - start

    def synchronize(self):
        pass

    def op(self):
        self.now += self.cost(self.calls)
        self.calls += 1


def test_warm_up_runs_until_the_time_is_spent():
    clock = SettlingClock(lambda i: 0.01)  # 10 µs calls
    warm = warm_up(clock.op, 0.05, clock, ExecMode.DISCRETE, spent_before_ms=0.0)
    assert 50.0 <= warm.spent_ms < 60.0 and warm.calls == clock.calls
    assert warm.calls == pytest.approx(5000, rel=0.1)
    # the -w calls count towards the time
    clock = SettlingClock(lambda i: 0.01)
    assert warm_up(clock.op, 0.05, clock, ExecMode.DISCRETE, spent_before_ms=49.0).calls < 200


def test_adaptive_warm_up_waits_for_the_block_median_to_settle():
    # Calls slow down the first 10,000 calls (30 µs falling to 10 µs: allocator and caches
    # settling, ~200 ms): the asked 100 ms pass mid-way, but the block medians still drift.
    def cost(i):
        return 0.01 + 0.02 * max(0.0, 1 - i / 10_000)

    clock = SettlingClock(cost)
    warm = warm_up(clock.op, 0.1, clock, ExecMode.DISCRETE, settle=True)
    assert clock.calls > 10_000 and warm.settled
    assert warm.block_medians[-1] == pytest.approx(0.01)
    recent = warm.block_medians[-3:]
    assert (max(recent) - min(recent)) / recent[-1] <= DRIFT_TOLERANCE
    # without settling it stops once the time is spent, still in the slow phase
    clock = SettlingClock(cost)
    early = warm_up(clock.op, 0.1, clock, ExecMode.DISCRETE)
    assert clock.calls < 10_000 and early.block_medians[-1] > 0.012


def test_adaptive_warm_up_gives_up_at_the_cap_when_it_never_settles():
    rng = random.Random(1)
    clock = SettlingClock(lambda i: rng.choice([0.01, 0.05]))
    warm = warm_up(clock.op, 0.02, clock, ExecMode.CONTINUOUS, settle=True)
    assert WARMUP_CAP * 20 <= warm.spent_ms < WARMUP_CAP * 20 * 1.5


def test_median_interval_from_order_statistics():
    # the textbook ranks (1-based (j, n+1-j)): n=10 -> (2, 9), n=20 -> (6, 15), n=100 -> (40, 61)
    assert median_ci_ranks(10) == (1, 8) and median_ci_ranks(20) == (5, 14)
    assert median_ci_ranks(100) == (39, 60)
    assert median_ci_ranks(5) == (0, 4)  # below 6 values even the range covers < 95%
    assert median_ci(list(range(10))) == (1, 8)
    # the normal approximation above a few hundred values agrees with the exact sums
    low, high = median_ci_ranks(3000)
    assert (low, high) == (1445, 1554)


def test_jittery_sample_is_noisy_and_a_steady_one_with_outliers_is_not():
    rng = random.Random(7)
    jitter = [rng.choice([0.2, 2.0]) for _ in range(200)]  # calls of 0.2 or 2 ms at random
    assert is_noisy(summarize(jitter))
    # 3,000 calls within about ±7% (p10-p90) plus 3% outliers at 5x: the CV is far over 10%,
    # but the median is pinned down
    steady = [rng.gauss(1.0, 0.05) for _ in range(2910)] + [5.0] * 90
    stats = summarize(steady)
    assert stats["cv"] > 0.3 and stats["ci_rel_width"] < 0.01
    assert not is_noisy(stats)
    assert stats["ci_low"] <= stats["median"] <= stats["ci_high"]
    assert not is_noisy(summarize([1.0, 5.0]))  # two values say nothing either way


SLEEPY = textwrap.dedent("""
    import random
    import time
    from param_compute import OperatorInterface, register_operator

    class Jitter(OperatorInterface):
        def forward(self, seconds):
            time.sleep(random.choice([0.0002, 0.002]))

    class Sleep(OperatorInterface):
        def forward(self, seconds):
            time.sleep(seconds)

    register_operator("test.jitter", Jitter)
    register_operator("test.sleep", Sleep)
""")


@pytest.fixture
def plugins(tmp_path):
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "sleepy.py").write_text(SLEEPY)
    return tmp_path / "plugins"


def test_a_jittery_workload_is_flagged_noisy(plugins):
    spec = simple_op("test.jitter", {"type": "float", "value": 0.0})
    [record] = param_compute.run(spec, workloads_dirs=[plugins], warmup=0, iteration=30).records
    assert record["noisy"] == ["forward"]
    assert record["stats"]["forward"]["ci_rel_width"] > 0.5


def test_continuous_mode_keeps_a_sample_and_compare_sees_a_2x_slowdown(plugins, tmp_path):
    spec = write_spec(tmp_path, simple_op("test.sleep", {"type": "float", "value": 0.0005}))
    done = run_cli("-c", spec, "--workloads-dir", plugins, "--exec-mode", "continuous",
                   "-w", "1", "-i", "100", "--output", tmp_path / "base.json")
    assert done.returncode == 0, done.stderr
    lines = (tmp_path / "base.json").read_text().splitlines()
    record = json.loads(lines[1])
    forward = record["metric"]["forward"]
    assert record["stats"]["forward"]["n"] >= 5 and len(forward["measure.time"]) == 10
    assert forward["measure.iterations"] == [100]  # PARAM-style: every metric a list
    # a 2x slower copy of the same run
    forward["measure.time"] = [2 * t for t in forward["measure.time"]]
    record["stats"]["forward"] = summarize(forward["measure.time"])
    lines[1] = json.dumps(record)
    (tmp_path / "slow.json").write_text("\n".join(lines) + "\n")
    compared = run_cli(tmp_path / "base.json", tmp_path / "slow.json", "--fail-on-regression",
                       "20", module="param_compute.analysis.compare")
    assert compared.returncode == 1, compared.stdout + compared.stderr
    assert "significantly slower" in compared.stdout + compared.stderr


def test_warmup_time_is_recorded_and_measure_follows(plugins):
    spec = simple_op("test.sleep", {"type": "float", "value": 0.001})
    [record] = param_compute.run(spec, workloads_dirs=[plugins], warmup=2, iteration=5,
                                 warmup_time=0.03, min_time=0.02).records
    forward = record["metric"]["forward"]
    assert len(forward["warmup.time"]) == 2  # the -w calls, as PARAM records them
    assert forward["warmup.total_time"][0] >= 30.0
    assert forward["warmup.extra_iterations"][0] >= 10
    assert sum(forward["measure.time"]) >= 20.0


def test_summary_says_when_n_is_too_small(tmp_path):
    spec = write_spec(tmp_path, simple_op("torch.add", tensor(4), tensor(4)))
    few = run_cli("-c", spec, "-i", "3", "--output", tmp_path / "few.json")
    assert few.returncode == 0
    assert "1 run(s) have fewer than 5 measured values: too few to trust" in few.stderr
    enough = run_cli("-c", spec, "-i", "5", "--output", tmp_path / "enough.json")
    assert "too few to trust" not in enough.stderr
    assert "±" in enough.stdout  # the median's interval, as a half-width


def test_negative_warmup_time_is_refused(tmp_path):
    spec = write_spec(tmp_path, simple_op("torch.add", tensor(4), tensor(4)))
    done = run_cli("-c", spec, "--warmup-time", "-1", "--output", tmp_path / "r.json")
    assert done.returncode == 2 and "--warmup-time must be >= 0" in done.stderr
    assert not (tmp_path / "r.json").exists()


def test_records_judge_noise_by_the_interval_not_the_spread():
    steady = [1.0] * 50 + [9.0] * 3
    record = RunRecord("op", "0|0|0", {}, passes=[PassResult("forward", [], steady)])
    out = record.to_json()
    assert "noisy" not in out and out["stats"]["forward"]["cv"] > 0.1


def test_continuous_min_time_measures_one_loop_of_equal_blocks(plugins):
    spec = simple_op("test.sleep", {"type": "float", "value": 0.001})
    [record] = param_compute.run(spec, workloads_dirs=[plugins], warmup=1, iteration=3,
                                 exec_mode="continuous", min_time=0.05).records
    forward = record["metric"]["forward"]
    calls = forward["measure.iterations"][0]
    # the 3 probe calls estimated ~1 ms a call; one loop of ~50 calls in 10 equal blocks
    # replaced them (with a top-up loop if sleeping ran longer than estimated)
    assert 10 <= len(forward["measure.time"]) <= 30 and 10 <= calls <= 60
    assert sum(forward["measure.time"]) * calls / len(forward["measure.time"]) >= 45.0
    assert all(0.9 <= t < 50 for t in forward["measure.time"])
