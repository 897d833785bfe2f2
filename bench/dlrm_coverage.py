"""DLRM coverage: is a recommendation model's step captured and replayed, embeddings included?

A DLRM-like model is built here (no downloads): 8 ``nn.EmbeddingBag`` tables of 100k x 64
(sum pooling, 20 indices per bag), a bottom MLP over 13 dense features, the pooled embeddings
concatenated with it and a top MLP, binary cross-entropy, SGD; batch 256, CPU, one thread.
One training step is recorded with ``ExecutionTraceObserver`` and a Kineto trace (after a
warm-up step), captured with ``python -m param_compute.capture --from-et ... --kineto ...``,
and replayed with ``python -m param_compute.run_benchmark``.

Checks (exit 1 on a miss):

* time covered: ``original_time.captured_us.cpu / total_us.cpu`` of ``NAME.capture.json``
  is at least 95%;
* nothing of the embedding ops was left out at capture, and every embedding config
  (``_embedding_bag``, its backward ops) was measured by the replay (status ok).

* the spec's ``__capture__`` says 1 thread on cpu (the Kineto trace carries the thread count
  as metadata).

The table shows per op the original CPU time (Kineto, Σ per call x count, profiler cost
included) beside the replayed Σ median x count. A second table replays the embedding configs
alone, warm, with ``--cold`` (rotate) and with zipf-distributed rows, to show what the
cache and the row distribution do to them.

    python bench/dlrm_coverage.py                  # the sizes above
    python bench/dlrm_coverage.py --quick          # small tables, a smoke test
    python bench/dlrm_coverage.py --distribution zipf:1.05   # replay with hot rows
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
from rich.console import Console
from rich.table import Table
from torch import nn
from torch.profiler import ExecutionTraceObserver, ProfilerActivity, profile

from param_compute.results.file import read_results
from param_compute.analysis.workload_totals import comparison_rows
from param_compute.results.totals import WorkloadTotals

console = Console(width=None if sys.stdout.isatty() else 160)
COVERED = 0.95


class DLRM(nn.Module):
    def __init__(self, tables: int, rows: int, dim: int, dense: int = 13):
        super().__init__()
        self.embeddings = nn.ModuleList(nn.EmbeddingBag(rows, dim, mode="sum")
                                        for _ in range(tables))
        self.bottom = nn.Sequential(nn.Linear(dense, 512), nn.ReLU(), nn.Linear(512, 256),
                                    nn.ReLU(), nn.Linear(256, dim), nn.ReLU())
        self.top = nn.Sequential(nn.Linear(dim * (tables + 1), 512), nn.ReLU(),
                                 nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, 1))

    def forward(self, dense, indices, offsets):
        pooled = [table(i, o) for table, i, o in zip(self.embeddings, indices, offsets)]
        return self.top(torch.cat([self.bottom(dense)] + pooled, dim=1))


def record(directory: Path, tables: int, rows: int, dim: int, batch: int, pooling: int):
    """One training step of the model recorded as an execution trace and a Kineto trace."""
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = DLRM(tables, rows, dim)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    dense = torch.randn(batch, 13)
    indices = [torch.randint(0, rows, (batch * pooling,)) for _ in range(tables)]
    offsets = [torch.arange(batch) * pooling for _ in range(tables)]
    labels = torch.rand(batch, 1)

    def step():
        optimizer.zero_grad()
        loss = nn.functional.binary_cross_entropy_with_logits(
            model(dense, indices, offsets), labels)
        loss.backward()
        optimizer.step()

    step()  # warm-up: gradients allocated, lazy initialization done
    et_path, kineto_path = directory / "dlrm_et.json", directory / "dlrm_kineto.json"
    observer = ExecutionTraceObserver().register_callback(str(et_path))
    with profile(activities=[ProfilerActivity.CPU], execution_trace_observer=observer) as prof:
        prof.add_metadata("num_threads", str(torch.get_num_threads()))  # -> __capture__
        step()
    prof.export_chrome_trace(str(kineto_path))
    return et_path, kineto_path


def _python(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small tables (a smoke test)")
    parser.add_argument("--iterations", type=int, default=5, help="replay -i (default 5)")
    parser.add_argument("--distribution", default=None,
                        help="replay the embedding indices with this distribution "
                             "(uniform, zipf:ALPHA)")
    parser.add_argument("--keep", type=Path, help="write the traces, spec and results here")
    args = parser.parse_args(argv)
    sizes = dict(tables=8, rows=100_000, dim=64, batch=256, pooling=20)
    if args.quick:
        sizes.update(rows=2_000, dim=16, batch=32)
    with tempfile.TemporaryDirectory() as scratch:
        directory = args.keep or Path(scratch)
        directory.mkdir(parents=True, exist_ok=True)
        et_path, kineto_path = record(directory, **sizes)
        spec = directory / "dlrm.json"
        captured = _python("param_compute.capture", "--from-et", str(et_path), "--kineto",
                           str(kineto_path), "-o", str(spec), "--target-device", "cpu")
        console.print(captured.stdout.rstrip())
        if captured.returncode != 0:
            console.print(f"[red]capture failed[/red]: {captured.stderr[-2000:]}")
            return 1
        if args.distribution:
            _with_distribution(spec, args.distribution)
        report = json.loads((directory / "dlrm.capture.json").read_text())
        results = directory / "dlrm_results.json"
        replay = _python("param_compute.run_benchmark", "-c", str(spec), "-w", "1", "-i",
                         str(args.iterations), "--num-threads", "1", "--no-progress",
                         "--output", str(results), "--max-memory", "none")
        if replay.returncode != 0:
            console.print(f"[red]replay exited {replay.returncode}[/red]: "
                          f"{replay.stderr[-2000:]}")
        records = read_results(results).records
        settings = json.loads(spec.read_text()).get("__capture__")
        status = _report(report, records, sizes, args.distribution, settings)
        _variants(spec, directory, args.iterations)
        return status


#: The embedding configs replayed again under these settings (label, flags, distribution).
VARIANTS = [("warm, uniform rows", [], None), ("--cold rotate", ["--cold"], None),
            ("--cold flush", ["--cold", "flush"], None), ("zipf:1.05 rows", [], "zipf:1.05")]


def _variants(spec_path: Path, directory: Path, iterations: int) -> None:
    """The embedding configs alone, replayed warm, cold and with hot rows."""
    spec = json.loads(spec_path.read_text())
    embedding = {op: entry for op, entry in spec.items() if "embedding" in op}
    table = Table(title="embedding configs replayed alone (Σ median x count, ms)")
    table.add_column("setting")
    for op in embedding:
        table.add_column(op.replace("aten::", ""), justify="right")
    for label, flags, distribution in VARIANTS:
        variant = directory / "dlrm_embedding.json"
        variant.write_text(json.dumps(embedding))
        if distribution:
            _with_distribution(variant, distribution)
        out = directory / "dlrm_embedding_results.json"
        run = _python("param_compute.run_benchmark", "-c", str(variant), "-w", "1", "-i",
                      str(iterations), "--no-progress", "--output", str(out),
                      "--max-memory", "none", *flags)
        if run.returncode != 0:
            table.add_row(label, *["failed"] * len(embedding))
            continue
        totals = WorkloadTotals()
        for record in read_results(out).records:
            totals.add_json(record)
        table.add_row(label, *[f"{totals.by_op[op].total_ms:.2f}" if op in totals.by_op
                               else "-" for op in embedding])
    console.print(table)


def _with_distribution(spec_path: Path, distribution: str) -> None:
    """Name ``distribution`` on every embedding op's row indices (their ``value_range`` ones)."""
    spec = json.loads(spec_path.read_text())
    for op, entry in spec.items():
        if "embedding" not in op:
            continue
        for config in entry["config"]:
            for asl in config["input"]:
                for arg in asl["args"]:
                    if isinstance(arg, dict) and "value_range" in arg:
                        arg["distribution"] = distribution
    spec_path.write_text(json.dumps(spec))


def _report(report, records, sizes, distribution, settings) -> int:
    original = report.get("original_time") or {}
    captured_us = (original.get("captured_us") or {}).get("cpu") or 0.0
    total_us = (original.get("total_us") or {}).get("cpu") or 0.0
    covered = captured_us / total_us if total_us else 0.0
    totals = WorkloadTotals()
    for record in records:
        totals.add_json(record)
    embedding = [r for r in records if "embedding" in r["op_name"]]
    failed = [f"{r['op_name']}|{r['id']}: {r.get('error', {}).get('message', r['status'])}"
              for r in embedding if r["status"] != "ok"]
    skipped = [s for s in report.get("skipped", []) if "embedding" in s["op"]]

    table = Table(title=f"DLRM-like step, {sizes['tables']} tables of {sizes['rows']} x "
                        f"{sizes['dim']}, batch {sizes['batch']}, pooling {sizes['pooling']}, "
                        f"CPU, 1 thread" + (f", indices {distribution}" if distribution else ""))
    for column in ("op", "calls", "original cpu ms", "replayed ms", "replay/orig"):
        table.add_column(column, justify="left" if column == "op" else "right")
    for row in comparison_rows(totals)[:12]:
        ratio = f"{row['ratio']:.2f}" if row["ratio"] is not None else "-"
        table.add_row(row["op"], str(row["calls"]), f"{row['original_cpu_ms']:.2f}",
                      f"{row['replayed_ms']:.2f}", ratio)
    console.print(table)
    checks = [
        (f"time covered {covered:.1%} (captured {captured_us / 1e3:.1f} of "
         f"{total_us / 1e3:.1f} ms original CPU)", covered >= COVERED),
        (f"embedding calls left out at capture: {sum(s['count'] for s in skipped)}",
         not skipped),
        (f"embedding configs measured: {len(embedding) - len(failed)} of {len(embedding)}",
         bool(embedding) and not failed),
        (f"replayed Σ median x count {totals.total_ms:.1f} ms over {totals.calls} calls", True),
        (f"__capture__ {settings}", bool(settings) and settings.get("num_threads") == 1
         and settings.get("device") == "cpu"),
    ]
    for text, ok in checks:
        console.print(("[green]ok  [/green] " if ok else "[red]MISS[/red] ") + text)
    for line in failed[:5]:
        console.print(f"  failed: {line}")
    return 0 if all(ok for _, ok in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
