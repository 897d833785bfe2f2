"""One measuring core (issue 30, items 1 and 2): the protocols and their resolution, the step
replay measured like every run (its stats, stop reason, guards, verdicts, repetitions), the
default protocol by time and noise, and the one rule combining processes' records."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import param_compute
from conftest import EXAMPLES, run_cli, simple_op, tensor, write_spec
from param_compute.capture.live.dispatch import capture_ops
from param_compute.errors import OptionsError
from param_compute.measure.devices import Device
from param_compute.measure.measurer import Measurer
from param_compute.measure.protocol import AUTO, PARAM, Protocol, resolve
from param_compute.measure.timing import CounterClock, ExecMode
from param_compute.results.combine import combine
from param_compute.results.records import PassResult, RunRecord
from param_compute.runtime.options import RunOptions
from param_compute.spec.step_file import step_path


# -- the protocols ----------------------------------------------------------------------------
@pytest.mark.parametrize("given, protocol, expected", [
    ({}, "auto", AUTO),
    ({"warmup": 2, "iteration": 20}, "param", dict(PARAM, warmup=2, iteration=20)),
    ({"iteration": 3}, "param", dict(PARAM, iteration=3)),  # one count given: PARAM's rest
    ({"protocol": "param"}, "param", PARAM),
    ({"max_noise": 1.0, "max_time": 2.0}, "auto", dict(AUTO, max_noise=1.0, max_time=2.0)),
    # --min-time alone measures for that long, as it always did: no noise rule, cap raised
    ({"min_time": 0.5, "warmup_time": 0.2}, "auto",
     dict(AUTO, min_time=0.5, warmup_time=0.2, max_noise=None, max_time=0.5)),
])
def test_the_protocol_is_resolved_from_what_was_given(given, protocol, expected):
    options = RunOptions(**given).check()
    assert options.protocol == protocol
    for name in ("warmup", "iteration", "warmup_time", "min_time", "max_noise", "max_time"):
        assert getattr(options, name) == expected[name], name
    assert options.measuring().min_samples == expected["min_samples"]
    # the JSON form holds the resolved values and reads back to the same options
    assert RunOptions.from_json(options.to_json()) == options


def test_an_unknown_protocol_is_refused_by_name():
    with pytest.raises(OptionsError, match="--protocol must be one of auto, param, got 'fast'"):
        resolve("fast", {})
    done = run_cli("-c", EXAMPLES / "simple_add.json", "--protocol", "fast")
    assert done.returncode == 2 and "invalid choice: 'fast'" in done.stderr


class _TickClock:
    """A host clock whose calls cost ``cost_ns(i)`` each (the workload advances it)."""

    def __init__(self, cost_ns):
        self.now, self.calls, self.cost_ns = 0, 0, cost_ns

    def read(self):
        return self.now

    def op(self):
        self.now += self.cost_ns(self.calls)
        self.calls += 1


def _measure(cost_ns, **protocol):
    clock = _TickClock(cost_ns)
    measurer = Measurer(Protocol(**protocol), Device("fake", CounterClock(clock.read)),
                        num_threads=None)
    return measurer.measure(clock.op, name="forward"), clock


def test_auto_takes_at_least_its_samples_whatever_the_cap():
    # 30 ms a call against the 0.1 s cap: five samples all the same, then the noise rule
    auto = {k: v for k, v in AUTO.items()}
    result, clock = _measure(lambda i: 30_000_000, **auto)
    stats = result.stats()
    assert stats["n"] == AUTO["min_samples"] and stats["stop_reason"] == "noise"
    # noisy calls: the cap ends it, but never below the least samples
    result, _ = _measure(lambda i: 30_000_000 * (1 + i % 3), **auto)
    stats = result.stats()
    assert stats["n"] == AUTO["min_samples"] and stats["stop_reason"] == "max_time"
    # tiny steady calls: the interval is tight at once
    result, clock = _measure(lambda i: 5_000, **auto)
    assert result.stats()["stop_reason"] == "noise" and result.stats()["n"] == 5


def test_the_canary_and_calibration_measure_through_the_one_measurer(monkeypatch):
    from param_compute.measure import calibrate, canary

    seen = []
    real = Measurer.measure

    def spy(self, fn, prepare=None, name="forward", label=("", "")):
        seen.append((name, self.protocol.exec_mode, self.protocol.iteration))
        return real(self, fn, prepare, name, label)

    monkeypatch.setattr(Measurer, "measure", spy)
    clock = _TickClock(lambda i: 1000)
    reading = canary.Canary(clock.op, clock.read).reading()
    assert reading == pytest.approx(1000 / 1e6) and seen[-1] == ("canary", ExecMode.DISCRETE,
                                                                 canary.CALLS)
    device = Device("fake", CounterClock(clock.read))
    rate = calibrate._rate(clock.op, 1e6, device, 0.001)
    assert seen[-1][:2] == ("calibrate", ExecMode.CONTINUOUS)
    assert rate == pytest.approx(1e6 / 1e-6)  # one unit of work a µs


def test_the_live_captures_step_is_a_measurement_of_the_measurer(monkeypatch):
    from param_compute.capture.live.timing import time_step

    seen = []
    real = Measurer.measure

    def spy(self, fn, prepare=None, name="forward", label=("", "")):
        result = real(self, fn, prepare, name, label)
        seen.append((name, len(result.measure_ms)))
        return result

    monkeypatch.setattr(Measurer, "measure", spy)
    host = []
    times = time_step(lambda: torch.relu(torch.ones(64)), 4, host=host)
    assert seen == [("step", 4)] and len(times) == len(host) == 4
    assert all(t > 0 for t in times) and host == pytest.approx(times)  # on the host: the same


# -- the default protocol end to end ----------------------------------------------------------
def _records(path: Path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_simple_add_measures_by_time_and_noise_without_flags(tmp_path):
    """The README's demo: no protocol flag, every run at least five values and no warning."""
    out = tmp_path / "r.json"
    done = run_cli("-c", EXAMPLES / "simple_add.json", "--output", out)
    assert done.returncode == 0, done.stderr
    assert "too few to trust" not in done.stdout + done.stderr
    header, *runs, finish = _records(out)
    assert header["run_options"]["protocol"] == "auto"
    for run in runs:
        stats = run["stats"]["forward"]
        assert stats["n"] >= 5 and stats["stop_reason"] in ("noise", "max_time")
    for args in (["-w", "1", "-i", "1"], ["--protocol", "param"]):
        done = run_cli("-c", EXAMPLES / "simple_add.json", "--output", tmp_path / "p.json",
                       *args)
        assert done.returncode == 0, done.stderr
        _, *runs, _ = _records(tmp_path / "p.json")
        assert {run["stats"]["forward"]["n"] for run in runs} == {1}
        assert all("stop_reason" not in run["stats"]["forward"] for run in runs)
        (tmp_path / "p.json").unlink()


# -- the step replay, measured like every run ------------------------------------------------
def _mlp_step(path: Path) -> Path:
    torch.manual_seed(0)
    x, w1, w2 = torch.randn(16, 32), torch.randn(32, 64), torch.randn(64, 8)
    with capture_ops() as cap:
        torch.softmax(torch.relu(x @ w1) @ w2, dim=-1)
    cap.write(path)
    return path


def _step_line(path: Path):
    [line] = [r for r in _records(path) if r.get("kind") == "step"]
    return line


def test_the_step_replay_takes_the_runs_protocol_and_its_stats(tmp_path):
    spec = _mlp_step(tmp_path / "s.json")
    for name, args in (("noise", ["--max-noise", "2"]), ("cpu", ["--timer", "cpu"]),
                       ("default", [])):
        out = tmp_path / f"{name}.json"
        done = run_cli("-c", spec, "--replay-step", "--output", out, *args)
        assert done.returncode == 0, done.stderr
        step = _step_line(out)
        isolated = [r for r in _records(out) if r.get("kind") == "run"]
        stats, config_stats = step["stats"]["step"], isolated[0]["stats"]["forward"]
        # the same fields as an isolated run's, the stop reason included
        assert set(config_stats) - {"kept"} <= set(stats) | {"kept"}
        assert stats["stop_reason"] == config_stats["stop_reason"]
        assert stats["n"] >= 5  # at least five steps by default
        assert step["step"]["call_timed_steps"] >= 1
        if name == "cpu":
            assert "measure.wall_time" in step["metric"]["step"]  # CPU times are the sample
        assert f"step replay: {stats['median']:.3f} ms per step (median of {stats['n']}" \
            in done.stdout + done.stderr


def test_the_step_replay_is_refused_by_the_memory_guard_before_it_allocates(tmp_path):
    spec = _mlp_step(tmp_path / "s.json")
    out = tmp_path / "r.json"
    # the isolated configs fit in 100 KB; the whole step's bound arguments do not
    done = run_cli("-c", spec, "--replay-step", "-w", "1", "-i", "2", "--max-memory", "20KB",
                   "--output", out)
    assert done.returncode == 1, done.stderr
    step = _step_line(out)
    assert step["status"] == "error" and step["error"]["phase"] == "memory"
    assert "the step's replay needs an estimated" in step["error"]["message"]
    assert "over the 19.5 KiB limit (--max-memory); nothing was allocated" \
        in step["error"]["message"]


def test_a_step_in_which_no_call_runs_is_an_error_not_a_time(tmp_path):
    spec = _mlp_step(tmp_path / "s.json")
    data = json.loads(step_path(spec).read_text())
    raw = json.loads(spec.read_text())
    for op in raw.values():  # every config made to fail: booleans none of its ops take
        if isinstance(op, dict) and "config" in op:
            for entry in op["config"]:
                for config in entry["input"]:
                    for arg in config.get("args", []):
                        if arg.get("type") == "tensor":
                            arg["dtype"] = "bool"
                            arg.pop("value_profile", None)  # a float tensor's: drop it
    spec.write_text(json.dumps(raw))
    step_path(spec).write_text(json.dumps(data))
    out = tmp_path / "r.json"
    done = run_cli("-c", spec, "--replay-step", "-w", "1", "-i", "2", "--output", out)
    assert done.returncode == 1
    step = _step_line(out)
    assert step["status"] == "error" and step["error"]["phase"] == "step"
    assert step["error"]["message"].startswith("no call of the step ran (4 calls; the first "
                                               "failure: ")
    assert "step replay failed: no call of the step ran" in done.stdout + done.stderr


def test_verify_checks_that_the_step_replayed_what_was_captured(tmp_path):
    spec = _mlp_step(tmp_path / "s.json")
    out = tmp_path / "ok.json"
    done = run_cli("-c", spec, "--replay-step", "-w", "1", "-i", "2", "--verify",
                   "--output", out)
    assert done.returncode == 0, done.stderr
    assert _step_line(out)["verify"]["status"] == "PASS"
    data = json.loads(step_path(spec).read_text())
    fed = next(call for call in data["calls"] if call.get("in"))
    fed["in"][0][2] = [5]  # fed from an output its producer does not have
    step_path(spec).write_text(json.dumps(data))
    out = tmp_path / "bad.json"
    done = run_cli("-c", spec, "--replay-step", "-w", "1", "-i", "2", "--verify",
                   "--output", out)
    assert done.returncode == 1
    verdict = _step_line(out)["verify"]
    assert verdict["status"] == "FAIL" and verdict["dataflow_mismatches"] == 1
    assert "step_replay|0|0|0 failed --verify: 1 fed input(s) replaced by generated data" \
        in done.stderr


def test_repetitions_measure_the_step_in_each_process_and_combine_it(tmp_path):
    spec = _mlp_step(tmp_path / "s.json")
    out = tmp_path / "r.json"
    done = run_cli("-c", spec, "--replay-step", "-w", "1", "-i", "3", "--repetitions", "2",
                   "--output", out, forked=True)
    assert done.returncode == 0, done.stderr
    stats = _step_line(out)["stats"]["step"]
    assert len(stats["repetition_medians"]) == 2 and stats["n"] == 6


def test_the_canary_reads_around_the_step_too(tmp_path, monkeypatch):
    from param_compute.runtime import executor as executor_module

    class Drifting:
        def before(self):
            return 0.0

        def after(self, started):
            return 0.5

    monkeypatch.setattr(executor_module, "Canary", Drifting)
    spec = _mlp_step(tmp_path / "s.json")
    result = param_compute.run(spec, warmup=1, iteration=2, replay_step=True)
    [step] = [r for r in result.records if r.get("kind") == "step"]
    assert step["canary_drift"] == 0.5 and step["disturbed"] is True


# -- one rule for processes' records ---------------------------------------------------------
def test_a_record_reads_back_from_its_json_form_and_combines_as_measured():
    one = PassResult("forward", [0.5], [1.0, 2.0, 3.0], {"measure.cpu_time": [1.0, 2.0, 3.0]},
                     iterations=3, flops=2_000_000, bytes=4_000_000,
                     peaks={"flops_per_s": 1e12, "bytes_per_s": 1e11},
                     facts={"stop_reason": "noise", "descheduled": 0.0})
    record = RunRecord("torch.mm", "0|0|0", {"build": None, "input": {"count": 3}},
                       passes=[one], target={"metric": "latency_ms", "value": 2.5},
                       canary_drift=None)
    written = record.to_json()
    assert RunRecord.from_json(written).to_json() == written
    slower = RunRecord.from_json(written)
    slower.passes[0].measure_ms = [4.0, 4.0, 4.0]
    joined = combine([RunRecord.from_json(written), slower], unit="round").to_json()
    stats = joined["stats"]["forward"]
    assert stats["repetition_medians"] == [2.0, 4.0] and stats["median"] == 3.0
    # rates, utilization and the target follow the combined median
    rates = joined["throughput"]["forward"]
    assert rates["gb_per_s"] == pytest.approx(4e6 / 3e-3 / 1e9)
    assert rates["bw_util"] == pytest.approx(4e6 / 3e-3 / 1e11)
    assert joined["target"] == {"metric": "latency_ms", "value": 2.5, "actual": 3.0,
                                "met": False}


def test_a_spec_op_named_like_the_step_is_not_the_step(tmp_path):
    """The step's run is told by its step file, not by its name: a config whose op is
    called step_replay would still be an ordinary run (here an unknown name, refused)."""
    spec = write_spec(tmp_path, simple_op("step_replay", tensor(4)))
    done = run_cli("-c", spec, "--dry-run", "--output", tmp_path / "r.json")
    assert done.returncode == 2 and "step_replay" in done.stderr


def test_a_config_failing_in_every_call_is_warned_about_once(tmp_path):
    """A step of 30 calls of one config that fails: one warning, and a count of the rest
    (a step of 20,000 such calls printed 20,000 lines)."""
    x = torch.randn(64)
    with capture_ops() as cap:
        for _ in range(30):
            torch.relu(x)
    cap.write(tmp_path / "s.json")
    raw = json.loads((tmp_path / "s.json").read_text())
    for op in raw.values():
        if isinstance(op, dict) and "config" in op:
            for arg in op["config"][0]["input"][0]["args"]:
                arg.update(dtype="bool")
                arg.pop("value_profile", None)
    (tmp_path / "s.json").write_text(json.dumps(raw))
    done = run_cli("-c", tmp_path / "s.json", "--replay-step", "-w", "1", "-i", "1",
                   "--output", tmp_path / "r.json")
    said = done.stdout + done.stderr
    assert said.count("step replay: calls[") == 1
    assert "29 more failed calls of the same 1 config(s) not shown" in said
    assert "no call of the step ran (30 calls" in said


def test_a_full_disk_mid_run_is_one_line_naming_the_file_and_nothing_torn(tmp_path,
                                                                         monkeypatch):
    """The results file's disk fills after the first record: one error line naming the file
    (it said "internal error: OSError"), exit 1, and the file ends at its last whole line."""
    import errno

    from param_compute import files

    spec = write_spec(tmp_path, {"torch.add": {
        "input_data_generator": "PyTorch:DefaultDataGenerator",
        "config": [{"input": [{"args": [tensor(n), tensor(n)]} for n in (4, 8, 16)]}]}})
    out = tmp_path / "r.json"
    real, written = files._write_all, []

    def filling(fd, data):
        if b'"op_name"' in data and any(b'"op_name"' in line for line in written):
            real(fd, data[:len(data) // 2])  # half a line reaches the disk, then it is full
            raise OSError(errno.ENOSPC, "No space left on device")
        written.append(data)
        real(fd, data)

    monkeypatch.setattr(files, "_write_all", filling)
    done = run_cli("-c", spec, "-w", "1", "-i", "1", "--output", out)
    assert done.returncode == 1
    assert "internal error" not in done.stderr and "Traceback" not in done.stderr
    assert f"{out}: the file system is full (No space left on device)" in done.stderr
    lines = out.read_bytes().split(b"\n")
    assert lines[-1] == b"" and all(json.loads(line) for line in lines[:-1])
    assert [json.loads(line)["kind"] for line in lines[:-1]] == ["header", "run"]


@pytest.mark.parametrize("args, message", [
    (["--max-noise", "0"], "--max-noise must be a percentage > 0 with --iteration >= 1, got 0.0 "
                           "(leave it out for no noise rule)"),
    (["--max-time", "1e308"], "--max-time 1e+308 s is more than a week (604800 s): a typo?"),
    (["--min-time", "1e9"], "--min-time 1e+09 s is more than a week (604800 s): a typo?"),
    (["--max-memory", "1e400"], "--max-memory 1e400: more than 1e+18 bytes (an exabyte); "
                                "write 'none' for no limit"),
])
def test_measuring_bounds_that_mean_nothing_are_refused(tmp_path, args, message):
    """--max-noise 0 silently meant off; --max-time 1e308 made every run an OverflowError
    record; --max-memory 1e400 ended as an internal error."""
    done = run_cli("-c", EXAMPLES / "simple_add.json", "--output", tmp_path / "r.json", *args)
    assert done.returncode == 2 and message in done.stderr, done.stderr
    assert "internal error" not in done.stderr and not (tmp_path / "r.json").exists()


def test_the_library_runs_the_spec_as_given_not_as_changed_mid_run(tmp_path):
    """The caller's dict changed while the run went on: the runs and the header's hash are
    those of the spec as it was given."""
    spec = {"torch.add": {"input_data_generator": "PyTorch:DefaultDataGenerator",
                          "config": [{"input": [{"args": [tensor(4), tensor(4)]}]}]}}
    given = json.loads(json.dumps(spec))

    class Mutating:
        def start(self, total):
            spec["torch.add"]["config"][0]["input"][0]["args"][0]["shape"] = [999]

        def run_done(self, run, record):
            pass

        def finish(self, summary):
            pass

    out = tmp_path / "r.json"
    param_compute.run(spec, warmup=0, iteration=1, output=out, sinks=[Mutating()])
    header, run, _ = _records(out)
    assert run["config"]["input"]["args"][0]["shape"] == [4]
    from param_compute.pipeline.loading import load_spec

    assert header["run_options"]["spec_sha256"] == load_spec(given, RunOptions()).digest
