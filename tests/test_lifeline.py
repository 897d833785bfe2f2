"""Children never outlive the run: the isolated worker, the profiler and the profiled child."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

import param_compute
from conftest import read_results, run_cli, simple_op, start_cli, tensor, write_spec
from param_compute.process import lifeline

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux /proc")

HANG = textwrap.dedent("""
    import time
    from param_compute import OperatorInterface, register_operator

    class Hang(OperatorInterface):
        def forward(self, *args):
            while True:
                pass  # busy, as a hung kernel would be

    register_operator("test.busy_hang", Hang)
""")


def _children(pid: int):
    """Pids of the processes whose parent is ``pid``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(entry.name))
    return found


def _gone(pids, within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if not any(lifeline.alive(pid) and not _zombie(pid) for pid in pids):
            return True
        time.sleep(0.1)
    return False


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_isolated_worker_dies_with_a_killed_parent(tmp_path):
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "hang.py").write_text(HANG)
    spec = write_spec(tmp_path, simple_op("test.busy_hang", {"type": "int", "value": 1}))
    parent = start_cli("-c", spec, "--workloads-dir", plugins, "--isolate", "--output",
                       tmp_path / "r.json")
    try:
        deadline = time.monotonic() + 120
        workers = []
        while time.monotonic() < deadline and not workers:
            # multiprocessing's spawn start also runs a resource tracker: the worker is the
            # child whose command line names the spawn entry point with a pipe handle.
            workers = [pid for pid in _children(parent.pid)
                       if b"multiprocessing.spawn" in Path(f"/proc/{pid}/cmdline").read_bytes()
                       and b"resource_tracker" not in Path(f"/proc/{pid}/cmdline").read_bytes()]
            time.sleep(0.2)
        assert workers, "the isolated worker never started"
        time.sleep(2)  # inside the hung config by now (or still starting: both must die)
        everyone = _children(parent.pid)
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        assert _gone(everyone, 10), f"children outlived the parent: {everyone}"
    finally:
        if parent.poll() is None:
            parent.kill()


def test_die_with_parent_and_watch_parent_end_a_child(tmp_path):
    """A grandchild tied by PR_SET_PDEATHSIG and one watching a pid both end with their run."""
    script = textwrap.dedent(f"""
        import os, subprocess, sys, time
        sys.path.insert(0, {str(Path(param_compute.__file__).parents[1])!r})
        from param_compute.process import lifeline
        child = subprocess.Popen([sys.executable, "-c",
            "import sys, time; sys.path.insert(0, %r);"
            "from param_compute.process import lifeline;"
            "lifeline.watch_parent(interval_s=0.1); time.sleep(60)" % sys.path[0]],
            env=dict(os.environ, {lifeline.PARENT_PID_ENV}=str(os.getpid())))
        tied = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                                preexec_fn=lifeline.die_with_parent)
        print(child.pid, tied.pid, flush=True)
        time.sleep(60)
    """)
    middle = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    pids = [int(p) for p in middle.stdout.readline().split()]
    assert len(pids) == 2 and all(lifeline.alive(p) for p in pids)
    middle.kill()
    middle.wait()
    assert _gone(pids, 10)


def test_stale_private_directories_are_found_and_removed(tmp_path):
    mine = lifeline.private_directory("param_compute_test_")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = Path(str(mine).replace(f"_{os.getpid()}_", f"_{dead.pid}_"))
    stale.mkdir()
    (stale / "batch.json").write_text("{}")
    try:
        assert lifeline.stale_directories("param_compute_test_") == [stale]
        assert lifeline.remove_stale_directories("param_compute_test_") == 1
        assert not stale.exists() and mine.exists()
    finally:
        mine.rmdir()


def test_a_worker_that_cannot_start_gives_error_records_and_a_finish_line(tmp_path,
                                                                          monkeypatch):
    from param_compute.runtime import isolation

    def broken(connection, setup):
        raise SystemExit(3)  # dies before it says "ready"

    monkeypatch.setattr(isolation, "worker_main", broken)
    # ``spawn`` pickles the target by reference: a fork start runs the patched function.
    fork = isolation.multiprocessing.get_context("fork")
    monkeypatch.setattr(isolation.multiprocessing, "get_context", lambda method=None: fork)
    spec = {**simple_op("torch.neg", tensor(4)), **simple_op("torch.abs", tensor(4)),
            **simple_op("torch.exp", tensor(4))}
    out = tmp_path / "r.json"
    result = run_cli("-c", write_spec(tmp_path, spec), "--isolate", "--output", out, "-i", "1")
    assert result.returncode == 1, result.stderr
    _, runs, finish = read_results(out)
    assert [r["status"] for r in runs] == ["error"] * 3
    messages = [r["error"]["message"] for r in runs]
    assert messages[0] == "the isolated worker could not start: crashed: exit status 3"
    assert messages[2] == "not run: the isolated worker could not start: crashed: exit status 3"
    assert finish["runs_failed"] == 3
    assert "internal error" not in result.stderr


CHILD_HANG = textwrap.dedent("""
    import os
    from param_compute import OperatorInterface, register_operator

    class HangWhenProfiled(OperatorInterface):
        '''Measures normally in the run; hangs in the profiled child (which the run started).'''
        def forward(self, *args):
            while os.environ.get("PARAM_COMPUTE_PARENT_PID"):
                pass
            return args

    register_operator("test.hang_when_profiled", HangWhenProfiled)
""")


def _descendants(pid: int):
    found, frontier = [], [pid]
    while frontier:
        children = _children(frontier.pop())
        found += children
        frontier += children
    return found


def test_profiler_and_profiled_child_die_with_a_killed_run(tmp_path, monkeypatch):
    from test_nsight import install_fake

    # A temporary directory of this test's own: a run elsewhere (another pytest-xdist worker's)
    # sweeps stale batch directories of dead runs from the shared one, this killed run's too.
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    bin_dir = tmp_path / "bin"
    install_fake(bin_dir, "ncu")
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "hang.py").write_text(CHILD_HANG)
    spec = write_spec(tmp_path, simple_op("test.hang_when_profiled", {"type": "int", "value": 1}))
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
               FAKE_PROFILER_RECORD=str(tmp_path / "calls.jsonl"), TMPDIR=str(temp))
    env.pop("FAKE_PROFILER_FAIL", None)
    env.pop(lifeline.PARENT_PID_ENV, None)
    run = start_cli("-c", spec, "--workloads-dir", plugins, "--ncu", "-i", "1", "--output",
                    tmp_path / "r.json", env=env)
    try:
        deadline = time.monotonic() + 120
        tree = []
        while time.monotonic() < deadline:
            tree = _descendants(run.pid)
            if any(b"batch_child" in Path(f"/proc/{p}/cmdline").read_bytes()
                   for p in tree if Path(f"/proc/{p}").exists()):
                break
            time.sleep(0.2)
        else:
            pytest.fail("the profiled child never started")
        batch_dirs = [d for d in lifeline.stale_directories("param_compute_batch_")]
        time.sleep(1)
        run.send_signal(signal.SIGKILL)
        run.wait()
        assert _gone(tree, 10), f"profiler processes outlived the run: {tree}"
        left = [d for d in lifeline.stale_directories("param_compute_batch_")
                if d.name.startswith(f"param_compute_batch_{run.pid}_")]
        assert left and not batch_dirs  # the killed run's batch directory, and only it
        lifeline.remove_stale_directories("param_compute_batch_")
        assert not any(d.exists() for d in left)
    finally:
        if run.poll() is None:
            run.kill()


SEGFAULT = textwrap.dedent("""
    import ctypes
    from param_compute import OperatorInterface, register_operator

    class Segfault(OperatorInterface):
        def forward(self, *args):
            ctypes.string_at(0)  # reads address 0: SIGSEGV

    register_operator("test.segfault", Segfault)
""")


def test_resume_without_isolate_skips_and_records_the_config_that_crashed(tmp_path):
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "segv.py").write_text(SEGFAULT)
    spec = write_spec(tmp_path, {**simple_op("torch.neg", tensor(4)),
                                 **simple_op("test.segfault", {"type": "int", "value": 1}),
                                 **simple_op("torch.abs", tensor(4))})
    out = tmp_path / "r.json"
    arguments = ("-c", spec, "--workloads-dir", plugins, "--output", out, "-i", "1", "--resume")
    crashed = run_cli(*arguments, forked=True)
    assert crashed.returncode == -signal.SIGSEGV
    assert (tmp_path / "r.json.running").exists()
    resumed = run_cli(*arguments)
    assert resumed.returncode == 1, resumed.stderr
    assert "crashed the previous attempt (Segmentation fault)" in resumed.stderr
    _, runs, finish = read_results(out)
    records = [r for r in runs if "op_name" in r]
    assert [(r["op_name"], r["status"]) for r in records] == [
        ("torch.neg", "ok"), ("test.segfault", "error"), ("torch.abs", "ok")]
    error = records[1]["error"]
    assert error["type"] == "CrashedBefore" and "not run again" in error["message"]
    assert finish["runs_failed"] == 1 and finish["runs_ok"] == 1
    assert not (tmp_path / "r.json.running").exists()


def test_a_run_killed_from_outside_is_run_again(tmp_path):
    """SIGKILL leaves no fatal-signal text in the marker: the run is not treated as a crash."""
    from param_compute.runtime import crash_marker

    results = tmp_path / "r.json"
    crash_marker.marker_path(results).write_text('{"run": "torch.neg|0|0|0", "pid": 1}\n')
    assert crash_marker.previous_crash(results) is None
    crash_marker.marker_path(results).write_text(
        '{"run": "torch.neg|0|0|0", "pid": 1}\nFatal Python error: Aborted\n\nStack...')
    assert crash_marker.previous_crash(results) == ("torch.neg|0|0|0", "Aborted")


def test_any_number_of_signals_writes_exactly_one_finish_line(tmp_path):
    """Bursts of SIGINT/SIGTERM (a double Ctrl-C, a supervisor's TERM on top) at several
    moments: the file always ends with exactly one finish line, marked interrupted."""
    import json
    import random

    spec = {"torch.add": {"input_iterator": "RangeConfigIterator",
                          "input_data_generator": "PyTorch:DefaultDataGenerator",
                          "config": [{"input": [{"args": [
                              tensor(4096), {"type": "int", "value": [1, 500],
                                             "__range__": ["value"]}]}]}]}}
    spec_path = write_spec(tmp_path, spec)
    rng = random.Random(7)
    for attempt in range(3):
        out = tmp_path / f"r{attempt}.json"
        process = start_cli("-c", spec_path, "--output", out, "-i", "100")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (
                not out.exists() or out.read_text().count("\n") < 3 + attempt * 5):
            time.sleep(0.02)
        for _ in range(6):
            process.send_signal(rng.choice([signal.SIGINT, signal.SIGTERM]))
            time.sleep(rng.uniform(0, 0.004))
        _, stderr = process.communicate(timeout=60)
        assert process.returncode in (130, 143), stderr
        lines = [json.loads(line) for line in out.read_text().splitlines()]
        finishes = [line for line in lines if "finish_time" in line]
        assert len(finishes) == 1 and "finish_time" in lines[-1], stderr
        assert finishes[0]["interrupted"] in ("SIGINT", "SIGTERM")
        assert "Traceback" not in stderr


def test_runs_of_a_killed_profiled_batch_are_profiled_on_resume(tmp_path):
    """An attempt that ended (killed) after measuring runs but before their batch was profiled:
    the resumed run profiles them with the rest."""
    import json

    from test_nsight import install_fake, lines_of, kinds, ranged_add, run_main

    bin_dir = tmp_path / "bin"
    install_fake(bin_dir, "ncu")
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
               FAKE_PROFILER_RECORD=str(tmp_path / "calls.jsonl"), FAKE_PROFILER_RUN="0")
    env.pop("FAKE_PROFILER_FAIL", None)
    spec = write_spec(tmp_path, ranged_add(5))
    out = tmp_path / "r.json"
    first = run_main("-c", spec, "-i", "1", "--ncu", "--run-batch-size", "2", "--output", out,
                     "--stop-id", "torch.add|0|0|0_3", env=env)
    assert first.returncode == 0, first.stderr
    # As if killed after measuring 0_2 but before its batch: drop its batch and finish lines.
    lines = out.read_text().splitlines()
    kept = [line for line in lines if "finish_time" not in line]
    kept = kept[:-1] if "ncu_file" in kept[-1] else kept
    out.write_text("\n".join(kept) + "\n")
    assert kinds([json.loads(line) for line in kept]) == [
        "run 0|0|0_0", "run 0|0|0_1", "ncu 0|0|0_0-0|0|0_1", "run 0|0|0_2"]
    resumed = run_main("-c", spec, "-i", "1", "--ncu", "--run-batch-size", "2", "--output",
                       out, "--resume", env=env)
    assert resumed.returncode == 0, resumed.stderr
    assert "1 runs measured before the last attempt ended were not profiled" in resumed.stderr
    profiled = [k for k in kinds(lines_of(out)) if k.startswith("ncu")]
    assert profiled == ["ncu 0|0|0_0-0|0|0_1", "ncu 0|0|0_2-0|0|0_3", "ncu 0|0|0_4-0|0|0_4"]
