"""One command, ``param-compute COMMAND``, beside every ``python -m`` door; results on stdout,
the rest on stderr, no line wider than ``COLUMNS``; ``--quiet``; ``-o`` by each door."""

from __future__ import annotations

import contextlib
import fcntl
import io
import os
import pty
import runpy
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest

from conftest import EXAMPLES, REPO, read_results, run_cli, write_spec
from param_compute import terminal
from param_compute.cli.main import COMMANDS, dispatch

SIMPLE = EXAMPLES / "simple_add.json"
SWEEP = EXAMPLES / "matmul_sweep.json"
SCRIPT = Path(sys.executable).with_name("param-compute")
NAMES = [command.name for command in COMMANDS]


def _tool(*args, env=None, cwd=None, stdout=subprocess.PIPE):
    """``param-compute ARGS`` as installed (the console script of this environment)."""
    if not SCRIPT.is_file():
        pytest.skip(f"no console script beside {sys.executable} (pip install -e . makes it)")
    return subprocess.run([str(SCRIPT), *map(str, args)], stdout=stdout, stderr=subprocess.PIPE,
                          text=True, timeout=300, cwd=cwd or REPO,
                          env={**os.environ, **(env or {})})


def _help(run) -> tuple:
    """(exit status, what was printed) of a --help, in this process."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            status = run()
        except SystemExit as stop:
            status = stop.code or 0
    return status, out.getvalue()


def test_param_compute_help_lists_every_command_without_importing_torch():
    done = _tool("--help")
    assert done.returncode == 0, done.stderr
    listed = [line.split()[0] for line in done.stdout.splitlines()[5:5 + len(NAMES)]]
    assert listed == NAMES == ["run", "batch", "capture", "compare", "merge", "report", "totals",
                               "history", "ab", "calibrate", "export", "ncu", "nsys"]
    assert "python -m param_compute.run_benchmark" in done.stdout
    same = subprocess.run([sys.executable, "-m", "param_compute", "--help"], capture_output=True,
                          text=True, timeout=120, cwd=REPO)
    assert (same.returncode, same.stdout) == (0, done.stdout)
    probe = subprocess.run(
        [sys.executable, "-c", "import sys\nfrom param_compute.cli.main import main\n"
         "main(['--help'])\nprint(sorted(m for m in ('torch', 'rich') if m in sys.modules))"],
        capture_output=True, text=True, timeout=120, cwd=REPO)
    assert probe.stdout.splitlines()[-1] == "[]"  # the listing loads no tool


def test_a_bare_or_unknown_command_is_a_usage_error():
    bare = _tool()
    assert bare.returncode == 2 and "commands:" in bare.stderr and bare.stdout == ""
    typo = _tool("compre", "a.json")
    assert typo.returncode == 2
    assert "unknown command 'compre' (did you mean 'compare'?)" in typo.stderr


@pytest.mark.parametrize("command", COMMANDS, ids=NAMES)
def test_each_command_s_help_by_both_doors_names_that_door(command, monkeypatch):
    status, text = _help(lambda: dispatch([command.name, "--help"]))
    assert status == 0 and text.startswith(f"usage: param-compute {command.name} "), text[:200]
    assert _help(lambda: dispatch(["help", command.name])) == (status, text)
    monkeypatch.setattr(sys, "argv", [command.door, "--help"])
    status, text = _help(lambda: runpy.run_module(command.door, run_name="__main__",
                                                  alter_sys=True))
    assert status == 0 and text.startswith(f"usage: python -m {command.door} "), text[:200]


def test_the_table_goes_to_stdout_and_nothing_of_it_to_stderr(tmp_path):
    out = tmp_path / "out.txt"
    with out.open("w") as sink:
        done = _tool("run", "-c", SIMPLE, "-w", "1", "-i", "1", cwd=tmp_path, stdout=sink)
    assert done.returncode == 0, done.stderr
    table = out.read_text()
    assert "param_compute results" in table and "torch.add" in table and "1 measured" in table
    assert "torch.add" not in done.stderr and "┃" not in done.stderr and "│" not in done.stderr
    [results] = tmp_path.glob("benchmark_result_*.json")
    assert f"results: {results.name}" in done.stderr  # where they went: a status line


@pytest.mark.parametrize("width", [80, 57])
def test_columns_bounds_every_line_of_stdout_off_a_terminal(tmp_path, width):
    done = _tool("run", "-c", SWEEP, "-w", "0", "-i", "1", "-o", tmp_path / "r.json",
                 env={"COLUMNS": str(width)})
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) > 12 and "torch.nn.functional.softmax" in done.stdout
    assert max(len(line) for line in lines) <= width
    assert sum(line.startswith("│") for line in lines) == 12  # a row a run: nothing wraps


def _captured_results(tmp_path):
    """A captured workload's results file: configs with counts and original times."""
    def entry(m, count):
        return {"args": [{"type": "tensor", "dtype": "float", "shape": [m, 64], "requires_grad": False},
                         {"type": "tensor", "dtype": "float", "shape": [64, 8], "requires_grad": False}],
                "count": count, "original_us": {"cpu": 20.0, "device": None}}

    spec = {"torch.mm": {"input_data_generator": "PyTorch:DefaultDataGenerator",
                         "config": [{"input": [entry(16, 3), entry(48, 7)]}]}}
    out = tmp_path / "captured.json"
    done = run_cli("-c", write_spec(tmp_path, spec), "--output", out, "-w", "0", "-i", "5")
    assert done.returncode == 0, done.stderr
    return out


@pytest.mark.parametrize("width", [80, 60])
def test_the_other_tables_fit_columns_too(tmp_path, monkeypatch, width):
    results = _captured_results(tmp_path)
    monkeypatch.setenv("COLUMNS", str(width))
    db = tmp_path / "h.db"
    assert dispatch(["history", "add", str(results), "--label", "v1", "--db", str(db)]) == 0
    for argv in (["compare", results, results, "--resamples", "0"], ["totals", results],
                 ["history", "show", "--db", db]):
        done = run_cli(*argv[1:], module=next(c.module for c in COMMANDS if c.name == argv[0]))
        assert done.returncode == 0, (argv, done.stderr)
        assert done.stdout.strip(), argv
        assert max(len(line) for line in done.stdout.splitlines()) <= width, (argv, done.stdout)


def test_quiet_prints_no_table_only_warnings_and_errors(tmp_path):
    spec = write_spec(tmp_path, {"torch.mm": {
        "input_data_generator": "PyTorch:DefaultDataGenerator",
        "config": [{"input": [{"args": [{"type": "tensor", "dtype": "float", "shape": [2, 3]},
                                        {"type": "tensor", "dtype": "float", "shape": [4, 5]}]},
                              {"args": [{"type": "tensor", "dtype": "float", "shape": [2, 3]},
                                        {"type": "tensor", "dtype": "float", "shape": [3, 5]}]}]}]}})
    out = tmp_path / "r.json"
    done = run_cli("-c", spec, "--output", out, "-i", "2", "--quiet")
    assert done.returncode == 1  # one run failed
    assert done.stdout == ""
    assert "┃" not in done.stderr and "results:" not in done.stderr
    assert "1 measured" not in done.stderr  # the counts are the summary's
    assert "failed torch.mm|0|0|0" in done.stderr  # the error, whole
    assert "fewer than 5 measured values" in done.stderr  # the warning
    _, records, finish = read_results(out)
    assert [r["status"] for r in records] == ["error", "ok"] and finish["runs_ok"] == 1
    loud = run_cli("-c", spec, "--output", tmp_path / "s.json", "-i", "2")
    assert "param_compute results" in loud.stdout and "failed torch.mm|0|0|0" in loud.stdout
    base = run_cli(out, out, "--resamples", "0", "-q", module="param_compute.analysis.compare")
    assert (base.returncode, base.stdout) == (0, "")
    totals = run_cli(out, "--quiet", module="param_compute.analysis.workload_totals")
    assert (totals.returncode, totals.stdout) == (0, "")


def test_o_is_the_results_file_by_param_compute_and_param_s_prefix_by_its_door(tmp_path):
    assert _help(lambda: dispatch(["run", "-c", str(SIMPLE), "-w", "0", "-i", "1", "-q",
                                   "-o", str(tmp_path / "exact.json")]))[0] == 0
    header, [record], _ = read_results(tmp_path / "exact.json")
    assert record["op_name"] == "torch.add" and header["run_options"]["cmd_args"]["output"] \
        == str(tmp_path / "exact.json")
    done = run_cli("-c", SIMPLE, "-w", "0", "-i", "1", "-q", "-o", "legacy", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    [prefixed] = tmp_path.glob("legacy_*_*.json")  # PARAM's -o/--output-prefix
    assert not (tmp_path / "legacy").exists() and read_results(prefixed)[1]
    assert _help(lambda: dispatch(["run", "-c", str(SIMPLE), "-w", "0", "-i", "1", "-q",
                                   "--output-prefix", str(tmp_path / "long")]))[0] == 0
    assert len(list(tmp_path.glob("long_*_*.json"))) == 1  # the long flags: the same by both


def _terminal_of(columns: int):
    """A pseudo-terminal ``columns`` wide, as a text stream."""
    parent, child = pty.openpty()
    fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", 30, columns, 0, 0))
    return parent, os.fdopen(child, "w")


def test_the_width_is_columns_else_the_terminal_s_else_120(monkeypatch):
    parent, tty = _terminal_of(97)
    try:
        monkeypatch.delenv("COLUMNS", raising=False)
        assert terminal.width(tty) == 97
        assert terminal.width(io.StringIO()) == terminal.DEFAULT_WIDTH == 120
        monkeypatch.setenv("COLUMNS", "64")
        assert terminal.width(tty) == 64 and terminal.width(io.StringIO()) == 64
        monkeypatch.setenv("COLUMNS", "wide")  # not a number: as if unset
        assert terminal.width(io.StringIO()) == 120
    finally:
        tty.close()
        os.close(parent)


def test_fit_lines_cuts_table_rows_and_wraps_prose():
    lines = ["op       value", "a" * 30 + " 1.0", "a note that is long enough to wrap here"]
    out = terminal.fit_lines(lines, 20, rows=range(2))
    assert out[:2] == ["op       value", "a" * 19 + "…"]
    assert out[2:] == ["a note that is long", "  enough to wrap", "  here"]
    assert all(len(line) <= 20 for line in out)
    path = "/" + "p" * 30 + "/results.json"  # never split: it would not paste back
    assert terminal.fit_lines([f"wrote {path} here"], 20) == ["wrote", f"  {path}", "  here"]
