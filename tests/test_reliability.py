"""Reliability: isolated failures, crash-safe and resumable results, signals, the memory guard."""

from __future__ import annotations

import json
import os
import random
import signal
import textwrap
import time
from pathlib import Path

import pytest

import param_compute
from conftest import read_results, run_cli, simple_op, start_cli, tensor, write_spec

HOSTILE = textwrap.dedent("""
    import os, time
    from param_compute import OperatorInterface, register_operator

    class Abort(OperatorInterface):
        def forward(self, *args):
            os.abort()

    class Hang(OperatorInterface):
        def forward(self, *args):
            while True:
                time.sleep(1)

    class RaiseMemoryError(OperatorInterface):
        def forward(self, *args):
            raise MemoryError("pretend the host ran out")

    register_operator("test.abort", Abort)
    register_operator("test.hang", Hang)
    register_operator("test.memory_error", RaiseMemoryError)
""")


@pytest.fixture
def hostile_plugins(tmp_path):
    directory = tmp_path / "plugins"
    directory.mkdir()
    (directory / "hostile.py").write_text(HOSTILE)
    return directory


def _one_int_op(name):
    return simple_op(name, {"type": "int", "value": 1})


def test_isolated_run_survives_an_abort_and_a_hang(tmp_path, hostile_plugins):
    spec = {**_one_int_op("test.abort"), **_one_int_op("test.hang"),
            **simple_op("torch.add", tensor(4), tensor(4))}
    out = tmp_path / "r.json"
    started = time.monotonic()
    result = run_cli("-c", write_spec(tmp_path, spec), "--workloads-dir", hostile_plugins,
                     "--isolate", "--timeout", "2", "--output", out, "-i", "3")
    elapsed = time.monotonic() - started
    assert result.returncode == 1, result.stderr
    assert elapsed < 45
    _, runs, finish = read_results(out)
    assert [(r["op_name"], r["status"]) for r in runs] == [
        ("test.abort", "error"), ("test.hang", "error"), ("torch.add", "ok")]
    assert runs[0]["error"]["message"] == "crashed: signal 6 (SIGABRT)"
    assert runs[1]["error"]["message"] == "timeout after 2 s"
    assert runs[2]["stats"]["forward"]["n"] == 3
    assert finish["runs_failed"] == 2 and finish["runs_ok"] == 1
    assert "Traceback" not in result.stderr


def test_isolated_records_equal_in_process_records():
    spec = simple_op("torch.mm", tensor(16, 8), tensor(8, 4))
    inline = param_compute.run(spec, iteration=3).records[0]
    isolated = param_compute.run(spec, iteration=3, isolate=True).records[0]
    assert isolated["status"] == inline["status"] == "ok"
    # "noisy" (a sample's spread is high) and "disturbed" (another process took the core
    # while measuring) depend on the machine's load, not on where the config ran.
    measured_keys = {"noisy", "disturbed"}
    assert set(isolated) - measured_keys == set(inline) - measured_keys
    assert isolated["config"] == inline["config"]
    assert isolated["throughput"]["forward"]["flops"] == inline["throughput"]["forward"]["flops"]
    assert len(isolated["metric"]["forward"]["measure.time"]) == 3


def test_memory_error_is_a_failure_and_the_run_goes_on(hostile_plugins):
    spec = {**_one_int_op("test.memory_error"), **simple_op("torch.add", tensor(4), tensor(4))}
    result = param_compute.run(spec, workloads_dirs=[hostile_plugins])
    assert [r["status"] for r in result.records] == ["error", "ok"]
    assert result.records[0]["error"] == {"type": "MemoryError", "phase": "forward",
                                          "message": "pretend the host ran out"}


@pytest.mark.parametrize("shape", [[10**15], [10**10, 10**10, 10**10], [2**40, 2**40, 2**40]])
def test_memory_guard_refuses_absurd_configs_without_allocating(shape):
    spec = {"torch.sum": {"input_data_generator": "PyTorch:DefaultDataGenerator", "config": [
        {"input": [{"args": [tensor(*shape)]}]}, {"input": [{"args": [tensor(8)]}]}]}}
    records = param_compute.run(spec).records
    assert [r["status"] for r in records] == ["error", "ok"]
    error = records[0]["error"]
    assert error["phase"] == "memory" and error["type"] == "MemoryLimitExceeded"
    assert "nothing was allocated" in error["message"]


def test_max_memory_option(tmp_path):
    spec = simple_op("torch.add", tensor(1024), tensor(1024))
    out = tmp_path / "r.json"
    refused = run_cli("-c", write_spec(tmp_path, spec), "--max-memory", "4KiB", "--output", out)
    assert refused.returncode == 1
    [run] = read_results(out)[1]
    assert "need an estimated 8 KiB, over the 4 KiB limit" in run["error"]["message"]
    assert run_cli("-c", write_spec(tmp_path, spec), "--max-memory", "none", "--output",
                   out).returncode == 0
    bad = run_cli("-c", write_spec(tmp_path, spec), "--max-memory", "lots", "--output", out)
    assert bad.returncode == 2 and "cannot read 'lots'" in bad.stderr


def test_fail_fast_stops_at_the_first_failure(tmp_path):
    spec = {"torch.mm": {"input_data_generator": "PyTorch:DefaultDataGenerator", "config": [
        {"input": [{"args": [tensor(2, 3), tensor(3, 2)]}]},
        {"input": [{"args": [tensor(2, 3), tensor(4, 2)]}]},
        {"input": [{"args": [tensor(2, 3), tensor(3, 2)]}]}]}}
    out = tmp_path / "r.json"
    result = run_cli("-c", write_spec(tmp_path, spec), "--fail-fast", "--output", out)
    assert result.returncode == 1
    _, runs, finish = read_results(out)
    assert [r["status"] for r in runs] == ["ok", "error"]
    assert finish["stopped_early"] == "fail-fast"


def _range_spec(tmp_path, runs: int, size: int = 4):
    spec = {"torch.add": {"input_iterator": "RangeConfigIterator",
                          "input_data_generator": "PyTorch:DefaultDataGenerator",
                          "config": [{"input": [{"args": [
                              tensor(size), {"type": "int", "value": [1, runs],
                                             "__range__": ["value"]}]}]}]}}
    return write_spec(tmp_path, spec)


def _start(*args):
    return start_cli(*args)


def _lines(path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def test_sigkill_at_random_moments_then_resume_gives_each_id_exactly_once(tmp_path):
    spec = _range_spec(tmp_path, 200, size=4096)
    out = tmp_path / "r.json"
    arguments = ("-c", spec, "--output", out, "-w", "1", "-i", "200", "--resume")
    rng = random.Random(1234)
    kills = 0
    for _ in range(5):
        # Kill at a random moment while runs are being written: after a random number of new
        # lines, plus a random fraction of a run's time.
        before = _lines(out)
        target = before + rng.randint(2, 30)
        process = _start(*arguments)
        deadline = time.monotonic() + 120
        while process.poll() is None and _lines(out) < target and time.monotonic() < deadline:
            time.sleep(0.002)
        time.sleep(rng.uniform(0, 0.01))
        if process.poll() is None:
            process.send_signal(signal.SIGKILL)
            kills += 1
        process.wait()
    assert kills == 5
    final = _start(*arguments)
    _, stderr = final.communicate(timeout=300)
    assert final.returncode == 0, stderr
    lines = [json.loads(line) for line in out.read_text().splitlines()]  # no torn line
    ids = [line["id"] for line in lines if "op_name" in line]
    assert len(ids) == 200 and len(set(ids)) == 200
    assert sorted(ids) == sorted(f"0|0|0_{i}" for i in range(200))
    assert "run_options" in lines[0] and "finish_time" in lines[-1]
    assert sum("resume_time" in line for line in lines) >= 4


def test_resume_drops_a_torn_last_line_and_records_the_resumption(tmp_path):
    spec = _range_spec(tmp_path, 5)
    out = tmp_path / "r.json"
    assert run_cli("-c", spec, "--output", out, "--stop-id", "torch.add|0|0|0_3").returncode == 0
    lines = out.read_text().splitlines()[:-1]  # as if killed: no finish line...
    out.write_text("\n".join(lines) + '\n{"op_name": "torch.add", "id": "0|0|0_3", "sta')
    result = run_cli("-c", spec, "--output", out, "--resume")
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    ids = [line["id"] for line in lines if "op_name" in line]
    assert ids == [f"0|0|0_{i}" for i in range(5)]
    [marker] = [line for line in lines if "resume_time" in line]
    assert marker["completed_runs"] == 3 and marker["dropped_torn_line"] is True


def test_resume_refuses_a_file_of_another_spec(tmp_path):
    out = tmp_path / "r.json"
    assert run_cli("-c", _range_spec(tmp_path, 3), "--output", out).returncode == 0
    other = write_spec(tmp_path, simple_op("torch.add", tensor(2), tensor(2)), "other.json")
    result = run_cli("-c", other, "--output", out, "--resume")
    assert result.returncode == 2 and "was written for a different spec" in result.stderr


@pytest.mark.parametrize("signum, status", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_signals_finish_the_line_and_write_an_interrupted_finish_record(tmp_path, signum,
                                                                          status):
    out = tmp_path / "r.json"
    process = _start("-c", _range_spec(tmp_path, 500, size=4096), "--output", out, "-i", "200")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # wait until some runs are measured
        if out.exists() and len(out.read_text().splitlines()) > 3:
            break
        time.sleep(0.1)
    process.send_signal(signum)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == status, stderr
    header, runs, finish = read_results(out)  # every line parses
    assert runs and all(r["status"] == "ok" for r in runs)
    assert finish["interrupted"] == signal.Signals(signum).name
    assert "Traceback" not in stderr


def test_a_signal_inside_nested_critical_sections_is_raised_when_the_outermost_ends():
    """The guard's sections hold a signal until the outermost one ends, then raise it (after a
    body that raised, chained to the body's error); later signals are counted and dropped."""
    from param_compute.process.signals import Interrupted, SignalGuard

    guard = SignalGuard()
    done = []
    with pytest.raises(Interrupted) as stopped:
        with guard.critical():
            with guard.critical():
                guard._handle(signal.SIGTERM, None)  # as the handler is called
                done.append("inner")
            done.append("outer")  # still held: the outer section is open
    assert done == ["inner", "outer"] and stopped.value.signum == signal.SIGTERM
    assert guard.stopping and guard._depth == 0
    guard._handle(signal.SIGINT, None)
    assert guard.dropped == 1

    guard = SignalGuard()
    with pytest.raises(Interrupted) as stopped:
        with guard.critical():
            guard._handle(signal.SIGINT, None)
            raise OSError("disk full")
    assert isinstance(stopped.value.__context__, OSError) and guard._depth == 0
    with guard.critical():  # a section after a stop: nothing held, nothing raised
        pass


def _spawned_worker(pid: int):
    """The pid of ``pid``'s ``--isolate`` worker (a ``spawn_main`` child), or None."""
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return None
    for child in children:
        try:
            if b"spawn_main" in Path(f"/proc/{child}/cmdline").read_bytes():
                return int(child)
        except OSError:
            continue
    return None


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs Linux /proc")
def test_a_run_stopped_while_its_isolated_worker_starts_ends_quietly_and_takes_it_along(
        tmp_path):
    """SIGTERM while the worker still imports torch: the run ends (143) without waiting for
    the worker, and neither prints a traceback (the worker found no one to say 'ready' to)."""
    out = tmp_path / "r.json"
    process = _start("-c", write_spec(tmp_path, simple_op("torch.neg", tensor(4))),
                     "--isolate", "--output", out)
    deadline, worker = time.monotonic() + 60, None
    while worker is None and time.monotonic() < deadline and process.poll() is None:
        worker = _spawned_worker(process.pid)
        time.sleep(0.01)
    assert worker is not None, "the worker never started"
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 143, stderr
    assert "Traceback" not in stderr and "BrokenPipeError" not in stderr
    assert read_results(out)[2]["interrupted"] == "SIGTERM"
    assert not Path(f"/proc/{worker}").exists()  # stopped and reaped: it did not outlive the run


def test_a_worker_whose_parent_is_gone_ends_quietly(capfd):
    """The worker's start-up and shutdown say nothing when the parent's end of the pipe is
    closed: no BrokenPipeError traceback, exit status 0."""
    import multiprocessing

    from param_compute.runtime.isolation import worker_main
    from param_compute.runtime.options import RunOptions

    context = multiprocessing.get_context("spawn")
    for options in (RunOptions(warmup=0, iteration=1).to_json(), {"no": "such option"}):
        parent, child = context.Pipe()
        parent.close()  # the run is gone before the worker is ready (or failed its setup)
        setup = {"spec": simple_op("torch.neg", tensor(4)), "source": "s.json",
                 "options": options, "workloads_dirs": [], "parent_pid": os.getpid()}
        worker = context.Process(target=worker_main, args=(child, setup))
        worker.start()
        child.close()
        worker.join(120)
        assert worker.exitcode == 0
    err = capfd.readouterr().err
    assert "Traceback" not in err and "BrokenPipeError" not in err
