"""Host gaps probed like a hostile or careless user would: step files whose gaps cannot be
kept, waits far past the real step, a results file with damaged ``host_gaps``, Ctrl-C in a
long wait (``spec.step_file``, ``runtime.step_gaps``, ``runtime.step_run``,
``analysis.ledger``)."""

from __future__ import annotations

import json
import signal
import time

import pytest
import torch

from conftest import read_results, run_cli, start_cli
from param_compute.spec.step_file import read_step_file, step_path
from param_compute.runtime.options import RunOptions

X = torch.randn(16, 16)


def _step():
    y = torch.relu(X)
    due = time.perf_counter_ns() + 500_000  # the model's own Python: 0.5 ms
    while time.perf_counter_ns() < due:
        pass
    torch.sigmoid(y)


@pytest.fixture(scope="module")
def captured(tmp_path_factory):
    """A live capture with host gaps: (spec path, its step file's data)."""
    from param_compute.cli.capture import capture_run

    folder = tmp_path_factory.mktemp("gaps")
    path, _ = capture_run(_step, warmup=1, steps=1, repeats=3).write(folder / "s.json")
    return path, read_step_file(step_path(path))


def _edited(captured, tmp_path, name="e", **changes):
    """A copy of the capture whose step file has ``changes`` (a call's as ``calls``)."""
    spec, step = captured
    data = dict(json.loads(json.dumps(step)), **changes)
    out = tmp_path / f"{name}.json"
    out.write_text(spec.read_text())
    step_path(out).write_text(json.dumps(data))
    return out


def _measured(path, **options):
    from test_step_replay import _measure, _replay

    options = dict({"warmup": 0, "iteration": 1}, **options)
    return _measure(_replay(path, **options), **options)[1]["host_gaps"]


def test_a_step_file_with_no_gap_to_spread_says_so_not_that_the_replay_is_slow(
        captured, tmp_path):
    """Every gap 0 (a hand-edited file, or gaps only before calls the replay leaves out):
    the replay's host step is far shorter than the original's, and nothing can be added.
    The record said "the replay's own host step is as long as the original's already"."""
    _, step = captured
    calls = [dict(call, gap_us=0.0) for call in step["calls"]]
    path = _edited(captured, tmp_path, calls=calls, tail_gap_us=0.0)
    gaps = _measured(path, host_gaps="on")
    assert gaps["kept"] is False and gaps["replay_host_us"] < 0.5 * gaps["real_host_us"]
    assert "nowhere to add it" in gaps["why"] and "as long as" not in gaps["why"]
    path = _edited(captured, tmp_path, "slow", real_host_us=0.0)  # the replay is slower
    gaps = _measured(path, host_gaps="on")
    assert gaps["kept"] is False and "as long as the original's already" in gaps["why"]


def test_host_gaps_asked_for_and_not_kept_are_said_in_the_summary(captured, tmp_path):
    """``--host-gaps on`` on a step file without gaps replayed back to back without a word
    (the reason was in the results file only)."""
    _, step = captured
    calls = [{k: v for k, v in call.items() if k != "gap_us"} for call in step["calls"]]
    path = _edited(captured, tmp_path, calls=calls)
    data = json.loads(step_path(path).read_text())
    for key in ("real_host_us", "real_host_from", "tail_gap_us"):
        data.pop(key)
    step_path(path).write_text(json.dumps(data))
    for mode, said in (("on", True), ("auto", False)):
        done = run_cli("-c", path, "--replay-step", "--host-gaps", mode, "-w", "0", "-i", "1",
                       "--output", tmp_path / f"{mode}.res.json")
        assert done.returncode == 0, done.stderr
        line = "host gaps not kept (--host-gaps on): the step file has no host gaps"
        said_all = done.stdout + done.stderr
        assert (line in said_all) is said, said_all


def test_a_host_step_longer_than_the_step_itself_is_refused(captured, tmp_path):
    """``real_host_us`` is the host's part of the step (to the step function's return):
    5 s of it in a 2 ms step made every step-timed replay wait 5 s, and the ledger then set a
    5 s replay beside a 2 ms real step."""
    _, step = captured
    path = _edited(captured, tmp_path, real_host_us=step["real_step_us"] + 5e6)
    done = run_cli("-c", path, "--replay-step", "--host-gaps", "on", "-w", "0", "-i", "1",
                   "--output", tmp_path / "r.json")
    assert done.returncode == 2, done.stdout + done.stderr
    said = done.stdout + done.stderr
    assert f"{step_path(path)}: real_host_us: " in said and "is longer than the step it is " \
        "part of (real_step_us" in said and "Traceback" not in said
    assert not (tmp_path / "r.json").exists() or "step_replay" not in (tmp_path / "r.json") \
        .read_text()
    # the capture's own rounding (each to 0.1 µs) is no contradiction
    read_step_file(step_path(_edited(captured, tmp_path, "same",
                                     real_host_us=step["real_step_us"] + 0.1)))


def test_long_waits_are_announced_before_the_step_timed_passes(captured, tmp_path, caplog,
                                                               monkeypatch):
    """A step file may ask for a 10-minute host step: the replay spun through it step after
    step without a word. Now a warning says how long, and how to replay without the waits."""
    from param_compute.runtime import step_run as step_session

    path = _edited(captured, tmp_path)
    with caplog.at_level("WARNING", logger="param_compute"):
        assert _measured(path, host_gaps="on", iteration=2)["kept"] is True
    assert not [r for r in caplog.records if "host gaps waits" in r.getMessage()]
    monkeypatch.setattr(step_session, "LONG_WAITS_S", 1e-4)  # 0.1 ms: this step's waits
    with caplog.at_level("WARNING", logger="param_compute"):
        gaps = _measured(path, host_gaps="on", iteration=2)
    [said] = [r.getMessage() for r in caplog.records if "host gaps waits" in r.getMessage()]
    assert f"waits {gaps['added_us'] / 1e6:.1f} s in each timed step" in said
    assert "for the 2 steps the protocol starts with" in said  # -w 0 -i 2
    assert "--host-gaps off replays back to back" in said
    monkeypatch.undo()
    caplog.clear()
    with caplog.at_level("WARNING", logger="param_compute"):  # the file's largest
        step_session._say_long_waits({"added_us": 6e8 - 50.0, "real_host_us": 6e8,
                                      "replay_host_us": 50.0},
                                     RunOptions(iteration=5).measuring())
    assert "waits 600.0 s in each timed step (its host step 600.0 s, the replay's 0.050 ms), " \
           "at least 3600 s for the 6 steps the protocol starts with" \
           in caplog.records[0].getMessage()


def test_ctrl_c_in_a_long_wait_stops_the_run_at_once_and_keeps_the_isolated_results(
        captured, tmp_path):
    """A 10-minute host step (the bound) kept with --host-gaps on: Ctrl-C during its wait
    ends the run within seconds, with the isolated records and an interrupted finish line;
    the summary said "step replay failed: nothing measured"."""
    path = _edited(captured, tmp_path, real_step_us=6e8, real_host_us=6e8)
    out = tmp_path / "r.json"
    process = start_cli("-c", path, "--replay-step", "--host-gaps", "on", "-w", "0", "-i",
                        "1", "--output", out)
    deadline = time.monotonic() + 120
    while "host gaps waits" not in process.stderr_text() and time.monotonic() < deadline:
        assert process.poll() is None, process.stderr_text()
        time.sleep(0.05)
    time.sleep(0.2)  # in the wait now
    stopped = time.monotonic()
    process.send_signal(signal.SIGINT)
    stdout, stderr = process.communicate(timeout=60)
    assert time.monotonic() - stopped < 10 and process.returncode == 130, stderr
    assert "waits 600.0 s in each timed step" in stderr
    _, runs, finish = read_results(out)
    assert len(runs) == 2 and all(r["status"] == "ok" for r in runs)
    assert finish["interrupted"] == "SIGINT"
    assert "step replay: interrupted (not recorded)" in stdout + stderr
    assert "step replay failed" not in stdout + stderr and "Traceback" not in stderr


@pytest.mark.parametrize("gaps, shown", [
    ({"kept": True, "added_us": 1500.0}, 1.5),
    ({"kept": True, "added_us": 2000.0}, 2.0),  # all of the step (rounding allowed)
    ({"kept": True, "added_us": 1e14}, None),  # 1e11 ms "of" a 2 ms step
    ({"kept": True, "added_us": 5000.0}, None),
    ({"kept": "yes", "added_us": 5.0}, None), ({"kept": True, "added_us": "5"}, None),
    ({"kept": True, "added_us": -1}, None), ({"kept": True, "added_us": float("inf")}, None),
    ({"kept": True}, None), ("kept", None), ([1], None),
])
def test_ledger_shows_host_gaps_only_as_part_of_the_step_they_were_waited_in(gaps, shown):
    from test_step_replay import _record
    from param_compute.analysis.ledger import build_ledger, format_ledger, ledger_section
    from param_compute.results.file import upgraded

    line = {"step_replay": {"stats": {"median": 2.0}, "host_gaps": gaps, "configs": {}}}
    ledger = build_ledger([_record("aten::mm", "0|0|0", 1.0, 2, original=100.0)], upgraded(line),
                          {"device": "cpu"})
    assert ledger["host_gaps_ms"] == (pytest.approx(shown) if shown is not None else None)
    json.dumps(ledger, allow_nan=False)
    text, html = format_ledger(ledger), ledger_section(ledger)
    assert ("host gaps kept" in text) is (shown is not None)
    assert ("host gaps kept" in html) is (shown is not None)
    without = build_ledger([_record("aten::mm", "0|0|0", 1.0, 2)], upgraded({"step_replay": {
        "host_gaps": gaps}}))  # no step time: nothing it is part of
    assert without["host_gaps_ms"] is None


@pytest.mark.parametrize("fails_at, error", [(1, "ValueError"), (6, "RuntimeError"),
                                             (10, "KeyError"), (12, "IndexError")])
def test_capture_run_of_a_step_that_raises_says_so_and_leaves_the_process_as_found(
        tmp_path, fails_at, error):
    """A step raising in the warm-up (call 1), in the timing passes (call 6: the unprofiled
    step took calls 2-4, the in-place timer's set-up pass call 5), in the page-fault passes
    (call 10) or in the capture (call 12): a message naming the step and the error, exit 1,
    nothing written; the dispatch
    mode and the collector as they were. A RuntimeError printed a traceback, a ValueError
    exit 2 as if the command line were wrong."""
    import gc
    import textwrap

    module = f"failing_step_{fails_at}"  # a module of its own: run_cli runs in this process
    (tmp_path / f"{module}.py").write_text(textwrap.dedent(f"""
        import torch
        calls = [0]
        x = torch.randn(4, 4)

        def step():
            calls[0] += 1
            torch.relu(x)
            if calls[0] == {fails_at}:
                raise {error}("step {fails_at} went wrong")
    """))
    spec = tmp_path / "out.json"
    done = run_cli("--run", f"{module}:step", "-o", spec, module="param_compute.cli.capture",
                   cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    assert f"error: --run {module}:step: the step raised {error}: " in done.stderr
    assert f"step {fails_at} went wrong" in done.stderr and "Traceback" not in done.stderr
    assert not spec.exists() and not step_path(spec).exists()
    assert torch._C._len_torch_dispatch_stack() == 0 and gc.isenabled()


def test_host_gaps_without_a_step_replay_are_refused_not_ignored(captured, tmp_path):
    """``--host-gaps on`` without ``--replay-step`` ran the isolated configs and kept nothing,
    without a word."""
    from param_compute.errors import OptionsError

    spec, _ = captured
    for mode in ("on", "off"):
        done = run_cli("-c", spec, "--host-gaps", mode, "-i", "1", "--output",
                       tmp_path / f"{mode}.json")
        assert done.returncode == 2, done.stdout + done.stderr
        assert f"--host-gaps {mode} applies to the step replay: add --replay-step" \
            in done.stderr and not (tmp_path / f"{mode}.json").exists()
        with pytest.raises(OptionsError, match="applies to the step replay"):
            RunOptions.from_json(dict(RunOptions().to_json(), host_gaps=mode)).check()
    RunOptions(host_gaps="on", replay_step=True).check()
    RunOptions(host_gaps="off", step_file="s.step.json").check()  # --step implies the replay
    RunOptions().check()  # auto: nothing asked
    with pytest.raises(OptionsError, match="--host-gaps must be auto, on or off, got 'ON'"):
        RunOptions(host_gaps="ON", replay_step=True).check()


def test_cuda_seams_without_a_spin_kernel_or_a_host_clock_still_time_each_call(
        captured, tmp_path, monkeypatch):
    """A torch without ``torch.cuda._sleep`` (``spin_cycles_per_us`` 0): the in-place timer
    queues no cover and still times each call; a replay clock with ``cover`` but no
    ``host_elapsed_ms`` gets the first-launch guess (None) before every call."""
    from test_step_replay import _replay
    from param_compute.capture.live import timing as live_timing
    from param_compute.measure import devices

    log = []

    class FakeEvent:
        def __init__(self, enable_timing=False):
            pass

        def record(self):
            log.append("record")

        def elapsed_time(self, other):
            return 0.25

    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    monkeypatch.delattr(torch.cuda, "_sleep", raising=False)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    monkeypatch.setattr(devices, "spin_cycles_per_us", lambda index: 0.0)
    with live_timing.CallTimer(events=True) as timer:
        torch.relu(X)
        torch.sigmoid(X)
    assert log == ["record"] * 4 and [t for _, t in timer.resolve()] == [0.25e6, 0.25e6]

    path = _edited(captured, tmp_path)
    replay = _replay(path, host_gaps="on")
    replay.checked_pass()

    from test_host_gaps import HostReadingClock

    class CoverOnlyClock(HostReadingClock):  # a cover, but no host times to judge it by
        covers: list = []

        def cover(self, last_host_us):
            self.covers.append(last_host_us)

    replay.clock = CoverOnlyClock()
    times = [0] * len(replay.calls)
    replay.run_step_timed(times)
    assert replay.clock.covers == [None] * len(replay.calls) and all(t > 0 for t in times)


def test_capture_summary_says_a_traces_host_time_is_a_profiled_upper_bound(tmp_path):
    """A trace capture's summary said its host time ran "to the step's return", as a live
    capture's unprofiled one does: it is the profiled step window, which auto leaves out."""
    from test_host_gaps_trace import et_trace, kineto_trace
    from param_compute.capture import capture_execution_trace
    from param_compute.cli.capture import capture_run

    said = "\n".join(capture_execution_trace(et_trace(), source="et",
                                             kineto=kineto_trace()).summary_lines())
    assert "its host time: 2.000 ms (the profiled step window less the profiler's cost: an " \
           "upper bound, kept by --host-gaps on, not auto;" in said
    assert "to the step's return" not in said
    live = "\n".join(capture_run(_step, warmup=1, steps=1, repeats=3).summary_lines())
    assert "ms (to the step's return; with where the host spent it" in live
