"""Helpers shared by the bench scripts: spec building, the two timers, child processes, tables.

The machine these run on is small (two cores) and shared, so the scripts measure the same way:
one torch thread on both sides, ours and the reference interleaved round by round in one process,
every round or run gated on a core free of other load (``wait_quiet``), medians over rounds.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence

import torch
from rich.console import Console
from rich.table import Table
from torch.utils import benchmark

import param_compute
from _processes import wait_quiet  # noqa: F401  (re-exported: the scripts gate on it)

# Piped output would otherwise wrap at 80 columns; tables take only the width they need.
console = Console(width=None if sys.stdout.isatty() else 200)
median = statistics.median


def pin_threads() -> None:
    """One intra-op thread, as the engine uses by default (``--num-threads 1``)."""
    torch.set_num_threads(1)


def tensor(shape: Sequence[int], requires_grad: Optional[bool] = False) -> Dict[str, Any]:
    """A float32 tensor data spec; ``requires_grad=None`` keeps the generator's default (true)."""
    spec: Dict[str, Any] = {"type": "tensor", "dtype": "float", "shape": list(shape)}
    if requires_grad is not None:
        spec["requires_grad"] = requires_grad
    return spec


def op_spec(op: str, inputs: List[Dict[str, Any]], iterator: Optional[str] = None) -> dict:
    """A one-operator spec with one config holding ``inputs`` (arg-spec-lists)."""
    entry: Dict[str, Any] = {"input_data_generator": "PyTorch:DefaultDataGenerator",
                             "config": [{"input": inputs}]}
    if iterator:
        entry["input_iterator"] = iterator
    return {op: entry}


def ours_ms(spec: dict, warmup: int, iteration: int, exec_mode: str = "discrete") -> List[float]:
    """Run ``spec`` in-process through the engine; the forward median (ms) of every record."""
    result = param_compute.run(spec, warmup=warmup, iteration=iteration, exec_mode=exec_mode,
                               num_threads=1)
    if result.summary.failed:
        raise RuntimeError(f"engine run failed: {result.summary.failed[0].error}")
    return [record["stats"]["forward"]["median"] for record in result.records]


def torch_ms(fn: Callable, args: Sequence[Any] = (), kwargs: Optional[dict] = None,
             stmt: Optional[str] = None, min_run_time: float = 0.2) -> float:
    """torch.utils.benchmark's median (ms) of ``fn(*args, **kwargs)`` at one thread.

    The statement names every argument (``fn(a0, a1, dim=k_dim)``), as user code would, rather
    than unpacking ``*args`` per call; ``stmt`` overrides it (``torch`` and ``fn`` are in scope).
    """
    kwargs = kwargs or {}
    env = {"torch": torch, "fn": fn, **{f"a{i}": a for i, a in enumerate(args)},
           **{f"k_{k}": v for k, v in kwargs.items()}}
    if stmt is None:
        names = [f"a{i}" for i in range(len(args))] + [f"{k}=k_{k}" for k in kwargs]
        stmt = f"fn({', '.join(names)})"
    timer = benchmark.Timer(stmt, globals=env, num_threads=1)
    return timer.blocked_autorange(min_run_time=min_run_time).median * 1e3


def write_spec(directory: Path, name: str, spec: dict) -> Path:
    path = Path(directory) / name
    path.write_text(json.dumps(spec))
    return path


def run_cli(spec_path: Path, output: Path, *options: str,
            module: str = "param_compute.cli.run_benchmark") -> Dict[str, float]:
    """Run the command line (``module``'s ``main``) in a child: its wall and CPU time (s,
    start-up included), peak RSS.

    The peak comes from ``wait4``'s rusage of exactly that child (``ru_maxrss``, KiB on Linux),
    so earlier children do not mask it the way ``RUSAGE_CHILDREN`` would.
    """
    command = [sys.executable, "-m", module, "-c", str(spec_path),
               "--output", str(output), "--no-progress", *options]
    log_path = Path(output).with_suffix(".stderr")
    with open(log_path, "wb") as log:
        start = time.perf_counter()
        child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=log)
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - start
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} exited {child.returncode}:\n"
                           f"{log_path.read_text(errors='replace')[-2000:]}")
    return {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime,
            "maxrss_mb": usage.ru_maxrss / 1024}


def print_table(title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    table = Table(title=title, title_justify="left")
    for i, column in enumerate(columns):
        table.add_column(column, justify="left" if i == 0 else "right")
    for row in rows:
        table.add_row(*(str(cell) for cell in row))
    console.print(table)


def verdict(ok: bool) -> str:
    return "[green]pass[/green]" if ok else "[red]MISS[/red]"


def us(ms: float) -> str:
    return f"{ms * 1e3:.3f} µs"
