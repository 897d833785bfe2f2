"""Shared test helpers: the PARAM compatibility data and a CLI runner."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_CONFIGS = REPO.parent / "shared" / "param-configs"
EXAMPLES = REPO / "examples" / "configs"


@pytest.fixture
def shared_configs() -> Path:
    if not SHARED_CONFIGS.is_dir():
        pytest.skip("../shared/param-configs is not beside this checkout")
    return SHARED_CONFIGS


def run_cli(*args: str, module: str = "param_compute.run_benchmark", timeout: int = 300,
            cwd: Path = None) -> subprocess.CompletedProcess:
    """Run a command-line module in a fresh interpreter; never shows a progress bar."""
    command = [sys.executable, "-m", module, *map(str, args)]
    if module == "param_compute.run_benchmark" and "--no-progress" not in args:
        command.append("--no-progress")
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=cwd)


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
