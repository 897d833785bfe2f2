"""``capture --run``: the user's code in a process group the command owns, ended whole on a
signal; what the user's code did to its process (``sys.exit``, an interrupt it raised, an
import that failed, a crash, forks, threads, closed streams) said in one line, never a
traceback, never a silent exit; ``MODULE`` as a module name or a ``.py`` file (issue 31)."""

from __future__ import annotations

import json
import os
import signal
import textwrap
import time
from pathlib import Path

import pytest

from conftest import run_cli, start_cli
from param_compute.spec.step_file import step_path

CAPTURE = "param_compute.cli.capture"
STEP = """
import torch
x = torch.randn(4, 4)

def step():
    torch.relu(x)
"""


def _write(folder: Path, name: str, source: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(source))
    return path


def _capture(folder: Path, target: str, *extra: str):
    return run_cli("--run", target, "-o", "out.json", *extra, module=CAPTURE, cwd=folder)


def _nothing_written(folder: Path) -> bool:
    out = folder / "out.json"
    return not out.exists() and not step_path(out).exists() \
        and not (folder / "out.capture.json").exists()


def _gone(pid: int) -> bool:
    """No such process, or only its zombie (reaped by whoever adopted it)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
    except FileNotFoundError:
        return True
    return stat[stat.rfind(b")") + 2:].startswith(b"Z")


def _wait_gone(pids, seconds: float = 5.0) -> list:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        left = [pid for pid in pids if not _gone(pid)]
        if not left:
            return []
        time.sleep(0.05)
    return left


FORKING = """
import os, time, torch
x = torch.randn(4, 4)
started = []

def _note():
    with open("pids.txt", "a") as out:
        out.write(f"{os.getpid()}\\n")

def step():
    torch.relu(x)
    if not started:
        _note()
        for _ in range(8):
            pid = os.fork()
            if pid == 0:  # a copy that goes on working, as a data loader's would
                _note()
                while True:
                    time.sleep(0.05)
            started.append(pid)
    time.sleep(0.02)
"""


def _started_forking_capture(tmp_path):
    _write(tmp_path, "forking.py", FORKING)
    process = start_cli("--run", "forking:step", "-o", "out.json", "--steps", "100000",
                        module=CAPTURE, cwd=tmp_path)
    pids_file = tmp_path / "pids.txt"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert process.poll() is None, process.stderr_text()
        if pids_file.exists() and len(pids_file.read_text().split()) == 9:
            break
        time.sleep(0.05)
    pids = [int(p) for p in pids_file.read_text().split()]
    assert len(pids) == 9 and process.pid not in pids  # the step runs in a process of its own
    return process, pids


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_ends_every_process_the_step_forked_in_one_line(tmp_path, signum):
    """Ctrl-C stopped the top process only: 8 forked copies went on capturing as orphans,
    and a traceback was printed."""
    process, pids = _started_forking_capture(tmp_path)
    stopped = time.monotonic()
    process.send_signal(signum)
    stdout, stderr = process.communicate(timeout=30)
    assert process.returncode == 128 + signum, stderr
    assert time.monotonic() - stopped < 10
    assert stderr == (f"interrupted by {signal.Signals(signum).name}: the step's processes "
                      "were ended; nothing written\n")
    assert stdout == ""
    assert _wait_gone(pids) == []
    assert _nothing_written(tmp_path)


def test_killing_the_command_ends_the_step_s_group_too(tmp_path):
    """``kill -9`` of the command: its leader gets SIGTERM from the kernel and ends its whole
    group."""
    process, pids = _started_forking_capture(tmp_path)
    process.kill()
    process.wait(30)
    assert _wait_gone(pids, 10) == []


@pytest.mark.parametrize("source, target, status, message", [
    (STEP + "    import sys; sys.exit(3)\n", "exiting:step", 1,
     "error: --run exiting:step: the step called sys.exit(3) (-v: the traceback); nothing "
     "written"),
    (STEP + "    raise SystemExit(0)\n", "exiting:step", 1,
     "error: --run exiting:step: the step called sys.exit(0) (-v: the traceback); nothing "
     "written"),
    (STEP + "    raise SystemExit('bye now')\n", "exiting:step", 1,
     "error: --run exiting:step: the step called sys.exit('bye now') (-v: the traceback); "
     "nothing written"),
    ("import sys\nsys.exit(0)\n", "exiting:step", 1,
     "error: --run exiting:step: importing exiting called sys.exit(0) (-v: the traceback); "
     "nothing written"),
    (STEP + "    raise KeyboardInterrupt\n", "exiting:step", 1,
     "error: --run exiting:step: the step raised KeyboardInterrupt (-v: the traceback); "
     "nothing written"),
    ("raise KeyboardInterrupt\n", "exiting:step", 1,
     "error: --run exiting:step: importing exiting raised KeyboardInterrupt (-v: the "
     "traceback); nothing written"),
    ("import no_such_dependency_h31\n", "exiting:step", 1,
     "error: --run exiting:step: importing exiting raised ModuleNotFoundError: No module named "
     "'no_such_dependency_h31' (-v: the traceback); nothing written"),
    (STEP, "no_such_module_h31:step", 2,
     "error: --run no_such_module_h31:step: no module named no_such_module_h31 in {cwd} or on "
     "the path (MODULE is a module name (steps.train, from the current directory) or a .py "
     "file (steps/train.py))"),
    (STEP, "exiting:nothing", 2,
     "error: --run exiting:nothing: module exiting has no attribute nothing"),
    (STEP + "value = 3\n", "exiting:value", 2,
     "error: --run exiting:value: value is not callable (its type is int)"),
])
def test_what_the_user_s_code_did_is_one_line(tmp_path, source, target, status, message):
    """``sys.exit(0|3)`` in the step or at import passed through silently (exit 3, exit 0 with
    nothing written); a KeyboardInterrupt or an import error printed a traceback."""
    _write(tmp_path, "exiting.py", source)
    done = _capture(tmp_path, target)
    assert done.returncode == status, done.stderr
    assert done.stderr.splitlines() == [message.format(cwd=tmp_path)]
    assert done.stdout == ""
    assert _nothing_written(tmp_path)


def test_a_syntax_error_is_one_line_and_v_gives_the_traceback(tmp_path):
    _write(tmp_path, "broken.py", "def step(:\n    pass\n")
    done = _capture(tmp_path, "broken:step")
    assert done.returncode == 1
    [line] = done.stderr.splitlines()
    assert line.startswith("error: --run broken:step: importing broken raised SyntaxError: ")
    assert "(broken.py, line 1) (-v: the traceback); nothing written" in line
    verbose = _capture(tmp_path, "broken:step", "-v")
    assert verbose.returncode == 1
    assert "Traceback (most recent call last)" in verbose.stderr
    assert verbose.stderr.splitlines()[-1] == line
    assert _nothing_written(tmp_path)


@pytest.mark.parametrize("source, message", [
    (STEP + "    import os; os._exit(0)\n",
     "ended with exit status 0 (os._exit?) before the capture finished; nothing written"),
    (STEP + "    import ctypes; ctypes.string_at(0)\n",
     "was killed by SIGSEGV before the capture finished; nothing written"),
])
def test_a_step_that_ends_its_process_is_said_not_passed_off_as_success(tmp_path, source,
                                                                         message):
    """``os._exit(0)`` in the step: exit 0, nothing written, not a word; a segfault: 139 and
    the shell's words only."""
    _write(tmp_path, "ending.py", source)
    done = _capture(tmp_path, "ending:step")
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        f"error: --run ending:step: the process running the step {message}"]
    assert _nothing_written(tmp_path)


UNRULY = """
import os, sys, threading, time, torch
import helper  # beside this file: its folder is on the path
x = torch.randn(4, 4)
calls = [0]

def step():
    calls[0] += 1
    torch.relu(x)
    if calls[0] == 1:
        threading.Thread(target=time.sleep, args=(3600,), name="forever").start()
        if os.fork() == 0:  # a process left running after the capture
            with open(helper.PIDS, "a") as out:
                out.write(f"{os.getpid()}\\n")
            while True:
                time.sleep(0.05)
        if os.fork() == 0:
            return  # a copy of the capture that returns from the step
    if calls[0] == 2:
        os.chdir("/")
        sys.stdout.close()
        os.close(1)
"""


@pytest.mark.parametrize("form", ["./steps/train.py", "{abs}/steps/train.py"])
def test_an_unruly_step_from_a_py_file_is_captured_and_its_leftovers_named(tmp_path, form):
    """A step that forked a copy of the capture, left a process and a thread running, changed
    the working directory and closed standard output: the capture hung at exit for ever (the
    thread), lost its summary to a traceback (the closed stdout), and a path-like module name
    was a traceback."""
    _write(tmp_path, "steps/train.py", UNRULY)
    _write(tmp_path, "steps/helper.py", f"PIDS = {str(tmp_path / 'pids.txt')!r}\n")
    target = form.format(abs=tmp_path) + ":step"
    done = _capture(tmp_path, target)
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    copies = [line for line in lines if "forked by the step, returned from it; ended there" in
              line]
    assert len(copies) == 1 and copies[0].startswith("warning: process ")
    assert f"warning: --run {target}: the step left 1 thread running (forever): not waited " \
           "for" in lines
    assert f"warning: --run {target}: the step left 1 process running: ended" in lines
    assert "Traceback" not in done.stderr
    assert "spec: out.json" in done.stdout  # written where asked, said where it was started
    spec = json.loads((tmp_path / "out.json").read_text())
    assert spec.pop("__capture__")["source"] == f"--run {target}"
    relu = spec["aten::relu"]["config"][0]["input"][0]["count"]
    assert relu == 1  # one captured step, in one process
    assert _wait_gone([int(p) for p in (tmp_path / "pids.txt").read_text().split()]) == []


@pytest.mark.parametrize("target, message", [
    ("steps/train:step", "steps/train is no MODULE: write a module name (steps.train, from the "
                         "current directory) or a .py file (steps/train.py)"),
    ("./steps:step", "./steps is no MODULE: write a module name (steps.train, from the "
                     "current directory) or a .py file (steps/train.py)"),
    ("./steps/missing.py:step", "steps/missing.py: no such file"),
    ("steps/json.py:step", "json.py would be imported as json, a module already imported: "
                           "rename the file"),
    ("train:", "write MODULE:FUNCTION, MODULE a module name (steps.train, from the current "
               "directory) or a .py file (steps/train.py)"),
])
def test_a_path_that_is_no_py_file_is_refused_saying_how_to_write_it(tmp_path, target,
                                                                        message):
    _write(tmp_path, "steps/train.py", STEP)
    _write(tmp_path, "steps/json.py", STEP)
    done = _capture(tmp_path, target)
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [f"error: --run {target}: {message}"]
    assert _nothing_written(tmp_path)


def test_outputs_are_checked_before_a_process_starts(tmp_path):
    (tmp_path / "out.json").mkdir()
    _write(tmp_path, "plain.py", STEP)
    done = _capture(tmp_path, "plain:step")
    assert done.returncode == 2
    assert done.stderr.startswith("error: ") and "out.json" in done.stderr
    assert len(done.stderr.splitlines()) == 1


def test_the_process_group_module_kills_what_a_leader_leaves_and_reaps_it(tmp_path):
    """``process.group.run_grouped``: a leader that forks a sleeper and exits; the sleeper is
    counted, killed and reaped; a report written by the leader comes back."""
    import sys

    from param_compute.process.group import REPORT_FD_ENV, Tail, run_grouped

    script = textwrap.dedent(f"""
        import os, sys, time
        if os.fork() == 0:
            time.sleep(3600)
        os.write(int(os.environ[{REPORT_FD_ENV!r}]), b"done\\n")
        print("bye", file=sys.stderr)
    """)
    err = Tail(16)
    outcome = run_grouped([sys.executable, "-c", script], stderr=err, report=True)
    assert outcome.returncode == 0 and outcome.signum is None and not outcome.timed_out
    assert outcome.leftovers == 1 and outcome.report == b"done\n"
    assert err.text() == "bye\n"
    hung = run_grouped([sys.executable, "-c", "import time; time.sleep(3600)"], timeout_s=0.5,
                       grace_s=0.5)
    assert hung.timed_out and hung.returncode == -signal.SIGTERM
    flood = Tail(10)
    flood.write(b"x" * 100)
    flood.write(b"0123456789")
    assert flood.text() == "0123456789" and len(flood.data) <= 20


def test_a_step_file_that_is_a_fifo_or_a_hostile_name_is_refused_in_one_line(tmp_path):
    os.mkfifo(tmp_path / "waiting.py")  # an import would wait for a writer for ever
    done = _capture(tmp_path, "./waiting.py:step")
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "error: --run ./waiting.py:step: waiting.py: is a FIFO, not a regular file"]
    hostile = _capture(tmp_path, "evil\x1b[31m\n:step")
    assert hostile.returncode == 2
    assert hostile.stderr.splitlines() == [
        "error: --run evil\\x1b[31m\\n:step: evil\\x1b[31m\\n is no MODULE: write a module name "
        "(steps.train, from the current directory) or a .py file (steps/train.py)"]


def test_ctrl_c_during_a_trace_capture_is_one_line(tmp_path, monkeypatch):
    """Ctrl-C during --from-et printed a KeyboardInterrupt traceback."""
    import param_compute.capture.trace.execution_trace as execution_trace

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    trace = tmp_path / "trace.json"
    trace.write_text("{}")
    monkeypatch.setattr(execution_trace, "capture_execution_trace", interrupted)
    done = run_cli("--from-et", trace, "-o", tmp_path / "out.json", module=CAPTURE)
    assert done.returncode == 130
    assert done.stderr == "interrupted\n"
    assert _nothing_written(tmp_path)
