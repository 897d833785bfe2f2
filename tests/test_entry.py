"""Commands piped into a reader that stops early (``| head``) end quietly, without a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _piped_into_head(args, lines: int = 1):
    """Run ``python -m ARGS | head -LINES``: (exit status, stderr, what head printed)."""
    writer = subprocess.Popen([sys.executable, *args], cwd=REPO, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE)
    reader = subprocess.run(["head", f"-{lines}"], stdin=writer.stdout, capture_output=True,
                            text=True, timeout=120)
    writer.stdout.close()  # only head holds the pipe now: its exit breaks it
    _, err = writer.communicate(timeout=120)
    return writer.returncode, err.decode(), reader.stdout


def test_a_reader_that_leaves_ends_the_command_quietly():
    body = ("from param_compute.process.entry import run\nimport sys\n"
            "def main():\n    for i in range(10**6):\n        print('line', i)\n    return 0\n"
            "sys.exit(run(main))\n")
    status, err, out = _piped_into_head(["-c", body])
    assert out == "line 0\n"
    assert status == 141 and err == "", err


def test_every_python_m_entry_runs_its_main_through_the_pipe_guard():
    package = REPO / "param_compute"
    entries = [path for path in package.rglob("*.py")
               if "sys.exit(" in path.read_text() and (path.parent == package
                                                       or path.name == "__main__.py"
                                                       or path.parent.name == "tools")]
    assert len(entries) >= 13
    unguarded = [str(path.relative_to(REPO)) for path in entries
                 if "sys.exit(run(main))" not in path.read_text()]
    assert not unguarded, unguarded
