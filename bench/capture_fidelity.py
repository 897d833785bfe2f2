"""Capture fidelity: does replaying a captured workload add up to the model it came from?

For a transformer encoder (token embedding, one ``nn.TransformerEncoderLayer``, a vocabulary head,
cross-entropy) and a small conv net (conv, batch norm, max pool, conv, adaptive pool, linear,
cross-entropy), forward and backward: capture one training step from an execution trace and
live (``capture_ops``), replay both specs with the engine, and compare the replayed total
(Σ median × count) with the measured eager step time.

Then say what makes up the difference, with figures:

* the eager step split into time inside the captured operators (each aten call timed where it
  runs, by a dispatch mode) and time outside them (Python module code, autograd graph building
  and engine): the replay has no equivalent of the latter;
* the replay's own per-call floor: the engine timing the cheapest aten op (``aten::alias``) times
  the number of calls, a cost eager pays differently (a C++ dispatch, not a Python call);
* per operator, eager (in situ) against replayed: where the operators themselves differ
  (cache and allocator state: a replayed op runs again and again on the same warm inputs and
  reuses its output's memory; eager's activations are fresh allocations, first touched: on CPU
  the page faults of an eager step are counted and priced with a first-touch probe);
* the calls skipped at capture (none expected here), with their reasons.

Both sides run one torch thread (the engine's default). The eager step is timed in wall time and
in thread CPU time: on a shared machine a 50 ms step is preempted many times while the replay's
per-op medians are not, so the CPU-time figure is the one compared on CPU (on CUDA, wall time
with a synchronize). Exit status: 0 every check passed; 1 a replay below 95% of configs or a
replayed total more than ``--tolerance`` (default 25%) from the eager step.

    python bench/capture_fidelity.py                 # CPU, the sizes below
    python bench/capture_fidelity.py --device cuda --scale 4
    python bench/capture_fidelity.py --quick         # small sizes, a smoke test
    python bench/capture_fidelity.py --traces ../shared/traces [--sample] [--device cuda]

``--traces DIR``: instead, the table over real traces recorded by others (``_shared_traces``):
nodes, calls, captured, replayed on the device, coverage by count and by original time; with a
Kineto trace beside one, replayed vs original time per op.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

import torch
from rich.console import Console
from rich.table import Table
from torch import nn
from torch.profiler import ExecutionTraceObserver
from torch.utils._python_dispatch import TorchDispatchMode

import param_compute
from param_compute.capture import capture_execution_trace, capture_ops
from param_compute.results.totals import WorkloadTotals

console = Console(width=None if sys.stdout.isatty() else 160)
REPLAY_OK = 0.95


class Encoder(nn.Module):
    def __init__(self, vocab: int, d_model: int, heads: int, ff: int):
        super().__init__()
        self.embedding = nn.Embedding(vocab, d_model)
        self.layer = nn.TransformerEncoderLayer(d_model, heads, ff, batch_first=True)
        self.head = nn.Linear(d_model, vocab)

    def forward(self, tokens, targets):
        logits = self.head(self.layer(self.embedding(tokens)))
        return nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten())


class ConvNet(nn.Module):
    def __init__(self, channels: int, classes: int = 10):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, channels, 3, padding=1), nn.BatchNorm2d(channels), nn.ReLU(),
            nn.MaxPool2d(2), nn.Conv2d(channels, 2 * channels, 3, padding=1), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1))
        self.head = nn.Linear(2 * channels, classes)

    def forward(self, images, labels):
        return nn.functional.cross_entropy(self.head(self.features(images).flatten(1)), labels)


def build(name: str, scale: float, device: str, batch_scale: int = 1):
    torch.manual_seed(0)
    if name == "encoder":
        d_model, batch, seq, vocab = int(256 * scale), 8 * batch_scale, 64, 1000
        model = Encoder(vocab, d_model, 4, 4 * d_model)
        inputs = (torch.randint(0, vocab, (batch, seq)), torch.randint(0, vocab, (batch, seq)))
        label = f"encoder d_model={d_model} batch={batch}x{seq} vocab={vocab}"
    else:
        channels, batch, size = int(32 * scale), 16 * batch_scale, 32
        model = ConvNet(channels)
        inputs = (torch.randn(batch, 3, size, size), torch.randint(0, 10, (batch,)))
        label = f"convnet channels={channels} batch={batch}x3x{size}x{size}"
    model = model.to(device).train()
    inputs = tuple(t.to(device) for t in inputs)

    def step() -> None:
        model(*inputs).backward()  # gradients accumulate, as in the captured step
    return label, step


def synchronize(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def eager_times(step: Callable[[], None], device: str, n: int) -> Tuple[List[float], List[float]]:
    """Wall and thread-CPU milliseconds of ``n`` eager steps."""
    wall, cpu = [], []
    for _ in range(n):
        synchronize(device)
        start, start_cpu = time.perf_counter(), time.thread_time()
        step()
        synchronize(device)
        wall.append((time.perf_counter() - start) * 1e3)
        cpu.append((time.thread_time() - start_cpu) * 1e3)
    return wall, cpu


def execution_trace(step: Callable[[], None], path: Path) -> Path:
    observer = ExecutionTraceObserver()
    observer.register_callback(str(path))
    observer.start()
    try:
        step()
    finally:
        observer.stop()
        observer.unregister_callback()
    return path


def replay(spec: dict, device: str, warmup: int, iteration: int, l2_warm: bool = False,
           exec_mode: str = "discrete"):
    result = param_compute.run(spec, device=device, warmup=warmup, iteration=iteration,
                               throughput=False, cuda_l2_cache=l2_warm, exec_mode=exec_mode)
    totals = WorkloadTotals(top=5)
    for record in result.records:
        totals.add_json(record)
    ok = sum(r["status"] == "ok" for r in result.records)
    failures = [f"{r['op_name']}: {r['error']['message']}" for r in result.records
                if r["status"] != "ok"]
    return totals, ok, len(result.records), failures


def per_call_floor(device: str, iteration: int) -> float:
    """Median ms the engine measures for the cheapest aten call (an alias of a 1-element
    tensor): the replay's per-call cost before any work."""
    spec = {"aten::alias": {"input_data_generator": "PyTorch:DefaultDataGenerator",
                            "config": [{"input": [{"args": [
                                {"type": "tensor", "dtype": "float", "shape": [1],
                                 "requires_grad": False}]}]}]}}
    result = param_compute.run(spec, device=device, warmup=20, iteration=max(iteration, 50),
                               throughput=False)
    return result.records[0]["stats"]["forward"]["median"]


class InSituOpTimer(TorchDispatchMode):
    """Times every aten call of an eager step where it runs (cache, allocator and data as eager
    leaves them), at the level the capture records. Only the call itself is inside the timed
    region; the mode's own cost stays outside it."""

    def __init__(self):
        super().__init__()
        self.per_op: Dict[str, float] = defaultdict(float)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        start = time.perf_counter_ns()
        out = func(*args, **(kwargs or {}))
        self.per_op[f"aten::{func._schema.name.split('::', 1)[-1]}"] += \
            (time.perf_counter_ns() - start) / 1e6
        return out


def in_situ_ops(step: Callable[[], None], repeat: int = 5) -> Dict[str, float]:
    """Per operator, the median over ``repeat`` eager steps of its in-situ time (ms)."""
    samples: Dict[str, List[float]] = defaultdict(list)
    for _ in range(repeat):
        with InSituOpTimer() as timer:
            step()
        for op, ms in timer.per_op.items():
            samples[op].append(ms)
    return {op: statistics.median(values) for op, values in samples.items()}


def fault_cost_ms(size: int = 64 << 20, repeat: int = 3) -> Optional[float]:
    """Thread-CPU ms one first-touch page fault costs here: writing a fresh ``size`` buffer
    (mapped anew: it is above glibc's mmap threshold) minus writing it again, per fault."""
    costs = []
    for _ in range(repeat):
        faults, start = minor_faults(), time.thread_time()
        buffer = torch.empty(size, dtype=torch.uint8)
        buffer.fill_(1)
        first, faulted = time.thread_time(), minor_faults() - faults
        buffer.fill_(2)
        second = time.thread_time()
        del buffer
        if faulted:
            costs.append(((first - start) - (second - first)) * 1e3 / faulted)
    return statistics.median(costs) if costs else None


def minor_faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def measure(name: str, args, folder: Path) -> Dict[str, object]:
    label, step = build(name, args.scale, args.device, args.batch)
    for _ in range(3):
        step()
    synchronize(args.device)
    workloads = {"et": capture_execution_trace(execution_trace(step, folder / f"{name}.et.json"),
                                               skip_views=args.skip_views)}
    with capture_ops(skip_views=args.skip_views) as live:
        step()
    synchronize(args.device)
    workloads["live"] = live.workload
    rounds: Dict[str, List] = defaultdict(list)
    replays = {}
    for _ in range(args.rounds):  # eager and replays interleaved: drift hits both alike
        wall, cpu = eager_times(step, args.device, args.steps)
        rounds["wall"].append(statistics.median(wall))
        rounds["cpu"].append(statistics.median(cpu))
        for source, workload in workloads.items():
            totals, ok, total, failures = replay(workload.spec(), args.device, args.warmup,
                                                 args.iteration, args.l2 == "on",
                                                 args.exec_mode)
            rounds[source].append(totals.total_ms)
            replays[source] = (totals, ok, total, failures)
    faults = minor_faults()
    eager_times(step, args.device, args.steps)
    faults = (minor_faults() - faults) / args.steps
    return {"label": label, "step": step, "workloads": workloads, "replays": replays,
            "eager_wall": statistics.median(rounds["wall"]),
            "eager_cpu": statistics.median(rounds["cpu"]),
            "replayed": {s: statistics.median(rounds[s]) for s in workloads},
            "eager_ops": in_situ_ops(step) if args.device == "cpu" else {},
            "faults": faults}


def _ms(value) -> str:
    return "-" if value is None else f"{value:.2f}"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--scale", type=float, default=1.0, help="model width multiplier")
    p.add_argument("--batch", type=int, default=1, help="batch multiplier")
    p.add_argument("--l2", choices=["on", "off"], default="off",
                   help="CUDA: replay with the L2 cache kept warm (on) or flushed (off, the "
                        "engine's default)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=10, help="eager steps timed per round")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--iteration", type=int, default=10)
    p.add_argument("--tolerance", type=float, default=0.25)
    p.add_argument("--exec-mode", default="discrete",
                   choices=["discrete", "continuous", "continuous_events"],
                   help="the replay's exec mode (CUDA: continuous_events lets the host run ahead "
                        "of the GPU, as eager does)")
    p.add_argument("--skip-views", action="store_true")
    p.add_argument("--quick", action="store_true", help="tiny models, one round (smoke test)")
    p.add_argument("--json", type=Path, help="also write the figures as JSON")
    p.add_argument("--traces", type=Path, nargs="?", const="default", metavar="DIR",
                   help="the table over real traces in DIR (default ../shared/traces)")
    p.add_argument("--sample", action="store_true",
                   help="--traces: replay the smallest config of each op, not every config")
    args = p.parse_args(argv)
    if args.traces is not None:
        from _shared_traces import default_folder, shared_traces_table

        folder = default_folder() if str(args.traces) == "default" else args.traces
        if folder is None or not folder.is_dir():
            console.print(f"no traces folder: {args.traces}")
            return 2
        rows = shared_traces_table(console, folder, args.device, args.sample)
        if args.json:
            args.json.write_text(json.dumps(rows, indent=1, default=str))
        return 0
    if args.quick:
        args.scale, args.rounds, args.steps, args.iteration = 0.125, 1, 3, 3
    torch.set_num_threads(1)
    compare_cpu_time = args.device == "cpu"
    misses: List[str] = []
    table = Table(title=f"capture fidelity on {args.device} (1 thread; replayed = Σ median × "
                        "count; eager = one forward+backward step)", title_justify="left")
    for column in ("model", "source", "configs", "calls", "skipped", "replayed ok",
                   "replayed ms", "eager ms (wall)", "eager ms (cpu)", "replayed / eager",
                   "verdict"):
        table.add_column(column, justify="left" if column in ("model", "source", "verdict")
                         else "right")
    floor = per_call_floor(args.device, args.iteration)
    figures = {}
    with tempfile.TemporaryDirectory() as tmp:
        results = {name: measure(name, args, Path(tmp)) for name in ("encoder", "convnet")}
    fault_ms = fault_cost_ms() if args.device == "cpu" else None
    for name, r in results.items():
        eager = r["eager_cpu"] if compare_cpu_time else r["eager_wall"]
        for source, workload in r["workloads"].items():
            totals, ok, total, failures = r["replays"][source]
            skipped_configs = len(workload.skipped)
            share = ok / (total + skipped_configs) if total + skipped_configs else 0.0
            ratio = r["replayed"][source] / eager
            good = share >= REPLAY_OK and abs(ratio - 1) <= args.tolerance
            if share < REPLAY_OK:
                misses.append(f"{name}/{source}: {share:.1%} of configs replayed; {failures[:3]}")
            if abs(ratio - 1) > args.tolerance:
                misses.append(f"{name}/{source}: replayed/eager {ratio:.2f}, outside "
                              f"1 ± {args.tolerance}")
            table.add_row(r["label"] if source == "et" else "", source, str(total),
                          str(workload.captured_calls), str(sum(s.count for s in workload.skipped)),
                          f"{share:.1%}", _ms(r["replayed"][source]), _ms(r["eager_wall"]),
                          _ms(r["eager_cpu"]), f"{ratio:.2f}",
                          "[green]ok[/green]" if good else "[red]MISS[/red]")
            figures[f"{name}/{source}"] = {
                "model": r["label"], "configs": total, "calls": workload.captured_calls,
                "replayed_ok": share, "skipped": [s.to_json() for s in workload.skipped],
                "replayed_ms": r["replayed"][source], "eager_wall_ms": r["eager_wall"],
                "eager_cpu_ms": r["eager_cpu"], "ratio": ratio,
                "per_call_floor_ms": floor * workload.captured_calls,
                "eager_ops_in_situ_ms": sum(r["eager_ops"].values()) or None,
                "eager_faults_per_step": r["faults"], "fault_cost_ms": fault_ms}
    console.print(table)
    console.print(f"replay per-call floor (engine timing aten::alias): {floor * 1e3:.2f} µs")
    if fault_ms is not None:
        console.print(f"first-touch page fault cost (64 MiB probe): {fault_ms * 1e3:.2f} µs")
    for name, r in results.items():
        _explain(name, r, floor, compare_cpu_time, fault_ms)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1))
    for miss in misses:
        console.print(f"[red]miss[/red] {miss}", highlight=False)
    return 1 if misses else 0


def _explain(name: str, r, floor: float, compare_cpu_time: bool,
             fault_ms: Optional[float]) -> None:
    """What makes up the difference between eager and replayed, for the live capture."""
    totals = r["replays"]["live"][0]
    replayed = r["replayed"]["live"]
    eager = r["eager_cpu"] if compare_cpu_time else r["eager_wall"]
    calls = r["workloads"]["live"].captured_calls
    skipped = sum(s.count for s in r["workloads"]["live"].skipped)
    table = Table(title=f"{name}: where eager and replayed differ (live capture)",
                  title_justify="left")
    for column in ("component", "ms", "of eager", "note"):
        table.add_column(column, justify="left" if column in ("component", "note") else "right")
    rows = [("eager step", eager, f"{r['faults']:.0f} minor page faults per step")]
    if r["eager_ops"]:
        inside = sum(r["eager_ops"].values())
        rows += [("eager: the captured ops, timed in situ", inside,
                  "each aten call timed where it runs (median of 5 steps)"),
                 ("eager: outside the ops", eager - inside,
                  "Python module code, autograd graph and engine")]
    rows += [("replayed total (Σ median × count)", replayed,
              f"{calls} calls; {skipped} skipped at capture"),
             ("  of which the replay's per-call floor", floor * calls,
              f"{calls} × {floor * 1e3:.2f} µs (the engine timing aten::alias)")]
    if r["eager_ops"]:
        gap = sum(r["eager_ops"].values()) - replayed
        rows.append(("ops in situ − replayed", gap,
                     "the same ops, eager's memory state vs the replay's"))
        if fault_ms is not None:
            faults = r["faults"] * fault_ms
            rows += [("  first-touch page faults (eager only)", faults,
                      f"{r['faults']:.0f} faults × {fault_ms * 1e3:.2f} µs: fresh activations; "
                      "a replayed op reuses its output's memory"),
                     ("  the rest: cache state, replay floor, noise", gap - faults,
                      "replayed ops run on warm inputs, again and again")]
    for label, value, note in rows:
        table.add_row(label, _ms(value), f"{value / eager:.0%}", note)
    console.print(table)
    if not r["eager_ops"]:
        return
    by_op = {op.op_name: op.total_ms for op in totals.top_ops()}
    deltas = sorted(set(by_op) | set(r["eager_ops"]),
                    key=lambda op: -abs(r["eager_ops"].get(op, 0.0) - by_op.get(op, 0.0)))
    ops = Table(title=f"{name}: largest per-operator differences (eager in situ vs replayed)",
                title_justify="left")
    for column in ("op", "eager in situ ms", "replayed ms", "difference"):
        ops.add_column(column, justify="left" if column == "op" else "right")
    for op in deltas[:6]:
        eager_op, replayed_op = r["eager_ops"].get(op, 0.0), by_op.get(op, 0.0)
        ops.add_row(op, _ms(eager_op), _ms(replayed_op), f"{eager_op - replayed_op:+.2f}")
    console.print(ops)


if __name__ == "__main__":
    sys.exit(main())
