"""Shared test helpers: the PARAM compatibility data and a CLI runner."""

from __future__ import annotations

import atexit
import contextlib
import gc
import importlib
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from zygote import ZYGOTE, Forked

# Bytecode is cached for the test session even where PYTHONDONTWRITEBYTECODE is set: the suite
# starts dozens of Python processes (CLI runs, isolated workers, profiled batch children), and
# each would otherwise compile param_compute afresh (~0.4 s apiece), as would every pytest-xdist
# worker's assertion rewriting of the test modules. The caches go to __pycache__ (git-ignored).
sys.dont_write_bytecode = False
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

# The suite never reads or writes the user's caches (a calibrated peaks cache would give runs
# utilization the tests do not expect): each test process gets an empty cache home of its own,
# set here, before the zygote or any other process starts, so all of them inherit it.
SANDBOX_CACHE = Path(tempfile.mkdtemp(prefix="param_compute-test-cache-"))
os.environ.pop("PARAM_COMPUTE_CACHE_DIR", None)
os.environ["XDG_CACHE_HOME"] = str(SANDBOX_CACHE)
_SANDBOX_OWNER = os.getpid()  # a forked child exiting through atexit must not remove it
atexit.register(lambda: os.getpid() == _SANDBOX_OWNER
                and shutil.rmtree(SANDBOX_CACHE, ignore_errors=True))
# The operator-name index a dry run validates with (``operators.name_index``) lives in a folder
# of this test session, never in the user's cache (the processes the tests start inherit it).
if "PARAM_COMPUTE_NAME_INDEX_DIR" not in os.environ:
    os.environ["PARAM_COMPUTE_NAME_INDEX_DIR"] = str(SANDBOX_CACHE / "names")

# torch.compile's caches too (Inductor's compiled code, autotuning, Triton's kernels): under the
# sandbox, never the user's /tmp/torchinductor_USER, and compiles run in the test's own process
# (no pool of compile workers on a two-core machine).
os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(SANDBOX_CACHE / "torchinductor")
os.environ["TRITON_CACHE_DIR"] = str(SANDBOX_CACHE / "triton")
os.environ["TORCHINDUCTOR_COMPILE_THREADS"] = "1"

# Printed output is as wide as COLUMNS says (``param_compute.terminal``); pytest-xdist's workers
# run with COLUMNS=80 and a shell may set anything. The suite runs without it (the width off a
# terminal is then 120); a test that wants a width sets COLUMNS itself.
os.environ.pop("COLUMNS", None)

REPO = Path(__file__).resolve().parents[1]
SHARED_CONFIGS = REPO.parent / "shared" / "param-configs"
EXAMPLES = REPO / "examples" / "configs"


@pytest.fixture
def shared_configs() -> Path:
    if not SHARED_CONFIGS.is_dir():
        pytest.skip("../shared/param-configs is not beside this checkout")
    return SHARED_CONFIGS


def run_cli(*args: str, module: str = "param_compute.cli.run_benchmark", timeout: int = 300,
            cwd: Path = None, forked: bool = False) -> subprocess.CompletedProcess:
    """Run a command-line module's ``main(argv)``; never shows a progress bar.

    In this process by default (a fresh interpreter costs seconds of torch import per call and
    proves nothing more); ``forked=True`` runs it as a real process of its own (``start_cli``),
    for what only a process can show: a crash, a signal, an exit status.
    """
    argv = _cli_argv(module, args)
    if forked:
        process = ZYGOTE.start(argv, module=module, cwd=cwd)
        stdout, stderr = process.communicate(timeout)
        return subprocess.CompletedProcess([module, *argv], process.returncode, stdout, stderr)
    return _run_in_process(module, argv, cwd)


def start_cli(*args: str, module: str = "param_compute.cli.run_benchmark", cwd: Path = None,
              env=None) -> Forked:
    """Start ``python -m module args`` as a real process (forked from the pre-imported zygote,
    see ``zygote.py``), without a progress bar; a ``Popen``-like handle."""
    return ZYGOTE.start(_cli_argv(module, args), module=module, cwd=cwd, env=env)


def _cli_argv(module: str, args) -> list:
    argv = [str(a) for a in args]
    if module == "param_compute.cli.run_benchmark" and "--no-progress" not in argv:
        argv.append("--no-progress")
    return argv


def _run_in_process(module: str, argv, cwd) -> subprocess.CompletedProcess:
    main = importlib.import_module(module).main
    out, err = io.StringIO(), io.StringIO()
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    previous_dir = os.getcwd()
    try:
        if cwd is not None:
            os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(argv)
            except SystemExit as stop:  # argparse's --help and usage errors
                code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 2)
    finally:
        os.chdir(previous_dir)
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
        gc.unfreeze()  # main() freezes start-up objects for its process; a test process goes on
    return subprocess.CompletedProcess([module, *argv], code or 0, out.getvalue(), err.getvalue())


def read_results(path: Path):
    """(header, run records, finish line) of a results file."""
    lines = [json.loads(line) for line in Path(path).read_text().splitlines()]
    return lines[0], lines[1:-1], lines[-1]


def write_spec(tmp_path: Path, spec: dict, name: str = "spec.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(spec))
    return path


def tensor(*shape, dtype="float", **extra):
    return {"type": "tensor", "dtype": dtype, "shape": list(shape), **extra}


def simple_op(name: str, *args, kwargs=None, iterator=None, builds=None):
    """A one-config spec entry for ``name`` with the given input data specs."""
    arg_spec_list = {"args": list(args)}
    if kwargs is not None:
        arg_spec_list["kwargs"] = kwargs
    entry = {"input": [arg_spec_list]}
    if builds is not None:
        entry["build"] = builds
    op = {"input_data_generator": "PyTorch:DefaultDataGenerator", "config": [entry]}
    if iterator:
        op["input_iterator"] = iterator
    return {name: op}
