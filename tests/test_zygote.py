"""The tests' zygote (``zygote.py``) gives the signal and kill tests real processes: what they rely
on, checked here (exit statuses, signals, streams, working directory, environment)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import textwrap
import time

import pytest

from conftest import ZYGOTE, start_cli


def _script(tmp_path, body: str):
    path = tmp_path / "script.py"
    path.write_text(textwrap.dedent(body))
    return path


def test_a_script_runs_in_its_own_process_with_its_streams_cwd_and_environment(tmp_path):
    script = _script(tmp_path, """
        import json, os, sys
        print(json.dumps([os.getpid(), os.getppid(), os.getcwd(), os.environ["ZYGOTE_PROBE"],
                          sys.argv[1:], "torch" in sys.modules, __name__]))
        print("to stderr", file=sys.stderr)
        sys.exit(3)
    """)
    (tmp_path / "here").mkdir()
    process = ZYGOTE.start(["a", "b"], script=script, cwd=tmp_path / "here",
                           env=dict(os.environ, ZYGOTE_PROBE="yes"))
    stdout, stderr = process.communicate(timeout=60)
    pid, parent, cwd, probe, argv, preloaded, name = json.loads(stdout)
    assert process.returncode == 3 and pid == process.pid and os.getpid() not in (pid, parent)
    assert (cwd, probe, argv, name) == (str(tmp_path / "here"), "yes", ["a", "b"], "__main__")
    assert preloaded  # torch came with the fork: the point of the zygote
    assert stderr == "to stderr\n"


@pytest.mark.parametrize("body, status", [
    ("raise KeyboardInterrupt", -signal.SIGINT),  # as python: dies by SIGINT
    ("raise ValueError('boom')", 1),
    ("import sys; sys.exit('a message')", 1),
    ("pass", 0),
])
def test_exit_statuses_are_python_s(tmp_path, body, status):
    process = ZYGOTE.start([], script=_script(tmp_path, body))
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == status, stderr
    if status == 1:
        assert "boom" in stderr or "a message" in stderr


def test_a_signal_ends_the_process_as_it_ends_a_popen_one(tmp_path):
    script = _script(tmp_path, "import time\nprint('up', flush=True)\ntime.sleep(60)\n")
    process = ZYGOTE.start([], script=script)
    deadline = time.monotonic() + 60
    while process.stdout_text() != "up\n" and time.monotonic() < deadline:
        time.sleep(0.01)
    assert process.poll() is None
    with pytest.raises(subprocess.TimeoutExpired):
        process.wait(timeout=0.05)
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=60) == -signal.SIGTERM
    process.send_signal(signal.SIGTERM)  # ended already: nothing to signal, no error


def test_a_cli_process_exits_with_the_tool_s_status(tmp_path):
    process = start_cli("-c", tmp_path / "missing.json")
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 2 and "missing.json" in stderr and "Traceback" not in stderr
