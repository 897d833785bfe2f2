"""Host gaps: the original's host time between calls, captured live and kept by the step
replay (``--host-gaps``), so that on a device launches come at the original host's pace."""

from __future__ import annotations

import json
import time

import pytest
import torch

from conftest import run_cli
from param_compute.capture.live.timing import host_gaps, time_ops_in_place, time_step
from param_compute.spec.step_file import read_step_file, step_path
from param_compute.errors import OptionsError
from param_compute.runtime.options import RunOptions

#: The host work the test step does between its two ops, and after them (µs): long beside a
#: time slice, so that a preempted moment on a loaded machine does not reorder them.
BETWEEN_US, AFTER_US = 20_000, 10_000


def _spin(us: float) -> None:
    """Host work that is not an op (a model's Python): the host clock, busy."""
    due = time.perf_counter_ns() + us * 1e3
    while time.perf_counter_ns() < due:
        pass


X = torch.randn(16, 16)


def busy_step():
    y = torch.relu(X)
    _spin(BETWEEN_US)
    torch.sigmoid(y)
    _spin(AFTER_US)


def _captured(tmp_path):
    from param_compute.cli.capture import capture_run

    path, _ = capture_run(busy_step, warmup=1, steps=1, repeats=3).write(tmp_path / "s.json")
    return path, read_step_file(step_path(path))


def test_timeline_puts_the_host_time_where_the_step_spent_it():
    timeline = {}
    time_ops_in_place(busy_step, steps=1, passes=3, timeline=timeline)
    assert [name for name, _, _ in timeline["calls"]] == ["aten.relu.default",
                                                          "aten.sigmoid.default"]
    (_, first, _), (_, second, _) = timeline["calls"]
    assert second >= BETWEEN_US and first < second / 2
    assert timeline["tail_us"] >= AFTER_US
    gaps, tail = host_gaps(timeline)
    # less the step's smallest gap (the timer's own cost): the first call's becomes 0
    assert gaps["aten.relu.default"][0][0] == 0.0
    assert gaps["aten.sigmoid.default"][0][0] == pytest.approx(second - first, abs=0.01)
    assert tail == pytest.approx(timeline["tail_us"] - first, abs=0.01)
    host = []
    time_step(busy_step, 3, host=host)
    assert len(host) == 3 and min(host) >= BETWEEN_US + AFTER_US


def test_live_capture_writes_the_gaps_and_the_host_step(tmp_path):
    _, step = _captured(tmp_path)
    relu, sigmoid = step["calls"]
    assert relu["gap_us"] < BETWEEN_US / 4 and sigmoid["gap_us"] >= 0.7 * BETWEEN_US
    assert step["tail_gap_us"] >= 0.5 * AFTER_US
    assert step["real_host_us"] >= BETWEEN_US + AFTER_US
    assert step["real_step_us"] >= step["real_host_us"] - 1  # on the host: the same step
    assert step["real_host_from"] == "unprofiled"


def test_a_call_not_captured_hands_its_gap_and_its_time_to_the_next(tmp_path):
    from param_compute.capture.live.dispatch import capture_ops

    x = torch.randn(4, 4)
    with capture_ops(skip_views=True,
                     originals={"aten.relu.default": [1.0], "aten.sigmoid.default": [1.0]},
                     original_gaps={"aten.relu.default": [(5.0, 1.0)],
                                    "aten.t.default": [(7.0, 30.0)],
                                    "aten.sigmoid.default": [(11.0, 1.0)]}) as cap:
        y = torch.relu(x)
        z = y.t()  # not captured (a view, skipped): its host time is a gap in the replay
        torch.sigmoid(z)
    gaps = [call.get("gap_us") for call in cap.workload.step.calls]
    assert gaps == [5.0, 7.0 + 30.0 + 11.0]
    assert cap.pending_gap == 0.0


def test_replay_keeps_the_gaps_only_where_asked_and_says_so(tmp_path):
    path, step = _captured(tmp_path)
    records = {}
    for mode in ("on", "auto"):
        out = tmp_path / f"{mode}.json"
        done = run_cli("-c", path, "--replay-step", "--host-gaps", mode, "-w", "1", "-i", "3",
                       "--output", out)
        assert done.returncode == 0, done.stderr
        [records[mode]] = [json.loads(line) for line in out.read_text().splitlines()
                           if json.loads(line).get("kind") == "step"]
        if mode == "on":
            said = " ".join(done.stdout.split())  # the summary's lines wrap at the width
            assert "of the original's host time between calls kept (--host-gaps)" in said
    kept, auto = records["on"]["step"]["host_gaps"], records["auto"]["step"]["host_gaps"]
    assert kept["kept"] is True and kept["real_host_us"] == step["real_host_us"]
    assert kept["added_us"] == pytest.approx(kept["real_host_us"] - kept["replay_host_us"],
                                             abs=0.2)
    # the replayed step takes the original's host time: two small ops and the spins
    assert records["on"]["stats"]["step"]["median"] * 1e3 >= 0.9 * step["real_host_us"]
    assert auto["kept"] is False and "framework's own work" in auto["why"]
    assert records["auto"]["stats"]["step"]["median"] * 1e3 < 0.5 * BETWEEN_US
    totals = run_cli("--json", tmp_path / "on.json", module="param_compute.workload_totals")
    assert totals.returncode == 0, totals.stderr
    assert json.loads(totals.stdout)["host_gaps_ms"] == pytest.approx(kept["added_us"] / 1e3)
    text = run_cli(tmp_path / "on.json", module="param_compute.workload_totals").stdout
    assert "of it, host gaps kept (--host-gaps)" in text
    for mode, kept_line in (("on", True), ("auto", False)):  # the HTML report's step totals
        html = tmp_path / f"{mode}.html"
        done = run_cli(tmp_path / f"{mode}.json", "-o", html, module="param_compute.report")
        assert done.returncode == 0, done.stderr
        totals = html.read_text().split("<h2>Step totals</h2>")[1].split("</dl>")[0]
        assert ("of it, the original&#x27;s host gaps kept" in totals) is kept_line
        # the spins are the real step's time outside its two small ops
        assert "real step outside its ops" in totals


class _FakeCall:
    def __init__(self, failed=None):
        self.failed = failed


def _fitted(step, replay_host_us, failed=()):
    from param_compute.runtime.step_replay import StepReplay

    replay = StepReplay.__new__(StepReplay)  # only what fitting reads
    replay.step = step
    replay.calls = [_FakeCall("x" if i in failed else None) for i in range(len(step["calls"]))]
    replay.waits_ns, replay.tail_wait_ns, replay.scheduled = [0] * len(step["calls"]), 0, False
    replay._plan = None
    return replay, replay.fit_host_gaps(replay_host_us)


def test_fitting_spreads_the_missing_host_time_by_the_captured_shape():
    step = {"real_host_us": 1000.0, "tail_gap_us": 10.0,
            "calls": [{"gap_us": 0.0}, {"gap_us": 30.0}, {"gap_us": 60.0}]}
    replay, fit = _fitted(step, 400.0)
    assert replay.scheduled and fit["added_us"] == 600.0
    assert replay.waits_ns == [0, 180_000, 360_000] and replay.tail_wait_ns == 60_000
    # a call left out waits for nothing: its gap is waited where the host spent it, before
    # the next call replayed (here: after the last)
    replay, _ = _fitted(step, 400.0, failed={2})
    assert replay.waits_ns == [0, 180_000, 0] and replay.tail_wait_ns == 420_000
    replay, _ = _fitted(step, 400.0, failed={1})
    assert replay.waits_ns == [0, 0, 540_000] and replay.tail_wait_ns == 60_000
    replay, fit = _fitted(step, 1200.0)  # the replay's host is slower already
    assert not replay.scheduled and fit["added_us"] == 0.0 and replay.waits_ns == [0, 0, 0]
    replay, _ = _fitted(dict(step, tail_gap_us=0.0, calls=[{}, {}, {}]), 10.0)
    assert not replay.scheduled  # no shape: nowhere to put it


def test_host_gaps_are_on_by_default_on_a_device_only(tmp_path):
    from test_step_replay import _replay, _time_step

    _captured(tmp_path)
    assert not _replay(tmp_path / "s.json").wants_gaps  # auto on the host
    assert _replay(tmp_path / "s.json", host_gaps="on").wants_gaps
    assert not _replay(tmp_path / "s.json", host_gaps="off").wants_gaps

    class DeviceClock:  # what a CUDA device's clock is named: anything but "host"
        name = "cuda_events"

    from param_compute.runtime import step_replay

    original = step_replay.open_device

    def device(*args, **kwargs):
        opened = original(*args, **kwargs)
        opened.clock = DeviceClock()
        return opened

    step_replay.open_device = device
    try:
        assert _replay(tmp_path / "s.json").wants_gaps
        # a trace's host step is a profiled one, an upper bound: kept only when asked for
        path = step_path(tmp_path / "s.json")
        path.write_text(json.dumps(dict(json.loads(path.read_text()),
                                        real_host_from="profiled")))
        assert not _replay(tmp_path / "s.json").wants_gaps
        assert _replay(tmp_path / "s.json", host_gaps="on").wants_gaps
    finally:
        step_replay.open_device = original


def test_host_gaps_option_is_checked_and_carried_in_the_json_form():
    with pytest.raises(OptionsError, match="--host-gaps must be auto, on or off"):
        RunOptions(host_gaps="always").check()
    assert RunOptions.from_json(RunOptions(host_gaps="on").to_json()).host_gaps == "on"


class HostReadingClock:
    """A fake device clock (no ``cover``) whose stamps read the host clock, in ms."""
    name = "fake_events"
    barrier = None

    def reserve(self, count):
        return None

    def stamp(self):
        return time.perf_counter_ns() / 1e6

    def synchronize(self):
        return None

    @staticmethod
    def elapsed_ms(start, end):
        return end - start


def test_on_a_device_only_step_timed_passes_wait_and_the_device_interval_holds_the_waits(
        tmp_path):
    """The CUDA seam, with a fake device clock reading the host clock: a step timed whole
    spans the waits (the device sat idle while the host worked), a call-timed step does not
    (a wait would read as the next call's device time)."""
    from test_step_replay import _replay, _time_step

    _captured(tmp_path)
    replay = _replay(tmp_path / "s.json", host_gaps="on")
    replay.checked_pass()

    from param_compute.runtime.step_run import host_step_us

    replay.clock = HostReadingClock()
    fit = replay.fit_host_gaps(host_step_us(replay, replay.device))
    assert replay.scheduled and fit["added_us"] > 0.5 * (BETWEEN_US + AFTER_US)
    assert _time_step(replay) * 1e3 >= fit["added_us"]
    times = [0] * len(replay.calls)
    replay.run_step_timed(times)
    assert sum(times) / 1e3 < 0.25 * fit["added_us"], times


def test_in_place_timer_on_a_device_keeps_the_gpu_busy_before_each_start_event(monkeypatch):
    """The CUDA seam of the original's in-place timer, with fakes: a spin kernel is queued
    before each call's start event (long enough to cover the last call's host time), so the
    event pair times the call's kernels, not its launch from an idle GPU."""
    from param_compute.capture.live import timing as live_timing
    from param_compute.measure import devices
    from param_compute.measure.launch_cover import launch_cover_us

    log = []

    class FakeEvent:
        def __init__(self, enable_timing=False):
            self.name = f"event{len([e for e in log if e[0] == 'new'])}"
            log.append(("new", self.name))

        def record(self):
            log.append(("record", self.name))

        def elapsed_time(self, other):
            return 0.5

    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    monkeypatch.setattr(torch.cuda, "_sleep", lambda cycles: log.append(("sleep", cycles)))
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: log.append(("sync",)))
    monkeypatch.setattr(devices, "spin_cycles_per_us", lambda index: 2.0)
    x = torch.randn(8, 8)
    with live_timing.CallTimer(events=True) as timer:
        torch.relu(x)
        torch.sigmoid(x)
    kinds = [entry[0] for entry in log]
    assert kinds == ["new", "new", "sleep", "record", "record"] * 2
    first, second = [entry[1] for entry in log if entry[0] == "sleep"]
    assert first == int(launch_cover_us(None) * 2.0)  # before any host time is known
    host_us = (timer.spans[0][1] - timer.spans[0][0]) / 1e3
    assert second == int(launch_cover_us(host_us) * 2.0)
    assert [t for _, t in timer.resolve()] == [0.5e6, 0.5e6] and log[-1] == ("sync",)


def test_fault_counting_passes_run_no_clock_no_events_and_no_cover(monkeypatch):
    """On a device too, a pass counting page faults only calls and counts: no event pair, no
    spin kernel (they would only queue work); its times are nobody's."""
    from param_compute.capture.live import timing as live_timing
    from param_compute.measure import devices

    queued = []
    monkeypatch.setattr(torch.cuda, "Event", lambda **kw: queued.append("event"))
    monkeypatch.setattr(torch.cuda, "_sleep", lambda cycles: queued.append("sleep"))
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(devices, "spin_cycles_per_us", lambda index: 2.0)
    with live_timing.CallTimer(events=True, count_faults=True) as timer:
        torch.relu(torch.ones(4))
    assert queued == [] and len(timer.faults) == 2
    assert [str(func) for func, _ in timer.resolve()] == ["aten.ones.default",
                                                          "aten.relu.default"]


@pytest.mark.parametrize("real_us, kept, outside, noted", [
    (4000.0, False, 3.0, True),    # 75% of the step outside the ops, not replayed: said
    (4000.0, True, 3.0, False),    # kept by --host-gaps: nothing to explain
    (1050.0, False, 0.05, False),  # 5%: under the share worth a word
    (900.0, False, None, False),   # the ops read longer than the step (timer cost): no number
    (None, False, None, False),    # no real step: nothing to set them against
])
def test_ledger_shows_the_real_steps_time_outside_its_ops(real_us, kept, outside, noted):
    from test_step_replay import _record
    from param_compute.analysis.ledger import build_ledger, format_ledger, ledger_section
    from param_compute.results.file import upgraded

    line = {"step_replay": {"stats": {"median": 1.5}, "configs": {},
                            "host_gaps": {"kept": kept, "added_us": 500.0 if kept else 0.0}}}
    if real_us is not None:
        line["step_replay"]["real_step_us"] = real_us
    ledger = build_ledger([_record("aten::mm", "0|0|0", 0.4, 2, original=500.0)], upgraded(line),
                          {"device": "cpu"})
    assert ledger["original_ms"] == pytest.approx(1.0)
    assert ledger["outside_ops_ms"] == (pytest.approx(outside) if outside else None)
    text, html = format_ledger(ledger), ledger_section(ledger)
    assert ("real step outside its ops" in text) is (outside is not None)
    assert ("real step outside its ops" in html) is (outside is not None)
    assert ("75% of the real step is outside its ops" in text) is noted
    assert ("--host-gaps on keeps it" in html) is noted
    assert all(len(row) < 200 for row in text.splitlines())
