"""Commands piped into a reader that stops early (``| head``) end quietly, without a traceback."""

from __future__ import annotations

import json
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
    """Each ``python -m`` door is ``cli.main.door`` (``process.entry.run`` around the command's
    ``main``), the same ``main`` that ``param-compute COMMAND`` runs."""
    import importlib

    from param_compute.cli.main import BY_DOOR

    package = REPO / "param_compute"
    entries = [path for path in package.rglob("*.py")
               if "__main__" in path.read_text() and (path.parent == package
                                                      or path.name == "__main__.py"
                                                      or path.parent.name == "tools")]
    assert len(entries) >= 14
    doors = {}
    for path in entries:
        parts = path.relative_to(REPO).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__main__" else parts)
        doors[name] = path.read_text()
    assert "sys.exit(main())" in doors.pop("param_compute")  # cli.main.main guards itself
    assert set(doors) == set(BY_DOOR)
    for name, text in doors.items():
        assert f'door("{name}")' in text, name
        module = name if (package / f"{name[14:].replace('.', '/')}.py").exists() \
            else name + ".__main__"
        assert importlib.import_module(module).main is BY_DOOR[name].main(), name


def test_param_compute_piped_into_head_ends_quietly_as_the_python_m_door(tmp_path):
    _results_file(tmp_path / "a.json", 1000)
    for door in (["-m", "param_compute", "compare"], ["-m", "param_compute.compare"]):
        status, err, out = _piped_into_head([*door, tmp_path / "a.json", tmp_path / "a.json",
                                             "--max-rows", "100000", "--resamples", "0"])
        assert out.strip() and status == 141 and "Traceback" not in err, (door, status, err)


def test_a_reader_that_leaves_rich_output_ends_the_command_quietly_too():
    """rich's ``Console`` meets the closed pipe first and exits 1 (``compare``'s status for a
    failed regression gate): the reader gone, 141, as for a plain print."""
    body = ("from param_compute.process.entry import run\nimport sys\n"
            "from rich.console import Console\n"
            "def main():\n    console = Console(width=80)\n"
            "    for i in range(10**5):\n        console.print('line', i)\n    return 0\n"
            "sys.exit(run(main))\n")
    status, err, out = _piped_into_head(["-c", body])
    assert out == "line 0\n"
    assert status == 141 and err == "", err


def _results_file(path, runs: int):
    """A results file of ``runs`` measured runs of ``torch.neg``."""
    lines = [json.dumps({"run_options": {"device": "cpu"}, "sys_info": {}, "start_time": "x"})]
    lines += [json.dumps({"op_name": "torch.neg", "id": f"0|0|{i}", "status": "ok",
                          "config": {"input": {"args": [i]}},
                          "metric": {"forward": {"measure.time": [1.0, 1.1, 0.9]}}})
              for i in range(runs)]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_compare_piped_into_head_ends_quietly(tmp_path):
    """A real rich table past a pipe's buffer: ``compare A B | head`` is not a failed gate."""
    _results_file(tmp_path / "a.json", 1000)
    status, err, out = _piped_into_head(["-m", "param_compute.compare", tmp_path / "a.json",
                                         tmp_path / "a.json", "--max-rows", "100000",
                                         "--resamples", "0"])
    assert out.strip() and status == 141 and "Traceback" not in err, (status, err)


def test_history_show_piped_into_head_ends_quietly(tmp_path):
    """``history show | head``: the closed pipe was 'error: [Errno 32] Broken pipe', exit 2."""
    from conftest import run_cli

    _results_file(tmp_path / "a.json", 1500)
    db = tmp_path / "h.db"
    added = run_cli("add", "--db", db, "--label", "L", tmp_path / "a.json",
                    module="param_compute.cli.history")
    assert added.returncode == 0, added.stderr
    status, err, out = _piped_into_head(["-m", "param_compute.history", "show", "--db", db])
    assert out.strip() and status == 141 and err == "", (status, err)
