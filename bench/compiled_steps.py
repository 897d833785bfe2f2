"""Compiled steps: are torch.compile regions captured as graphs, counted honestly and replayed?

Three training steps built here (no downloads), each compiled with ``torch.compile`` (Inductor,
the default backend) and trained one step at a time with one torch thread:

* ``mlp``: a fused pointwise MLP: 4 blocks of ``h = Linear(x); x = x + tanh(h) * sigmoid(h) / 2``
  (width 1024, batch 256), whose pointwise work Inductor fuses, cross-entropy, SGD;
* ``gpt``: a GPT-style LM: embedding, 2 pre-norm blocks with causal SDPA (d 256, 4 heads,
  sequence 128, batch 8), vocabulary 4096, cross-entropy, SGD;
* ``conv``: a conv net with BatchNorm: 3 conv-BN-ReLU layers (32 to 64 channels, a residual
  add) at 32x32, batch 32, average pooling, a linear head, cross-entropy, SGD with momentum.

Per model, in fresh processes all pinned to one CPU (``_processes.pinned_cpu``: the VM's two
vCPUs differ by up to 20%):

1. the capture (first): ``capture --run`` in library form (the compiled step timed
   unprofiled, each call timed in place, then captured: each compiled region one call of its
   graph), then one step recorded with an execution trace and a Kineto trace, captured with
   ``--from-et --kineto``; the compiled step's real time (median of ``--real-steps``);
2. ``--reps`` repetitions, interleaved, of: the real compiled step (a fresh process), its
   replay (``run -c SPEC --replay-step --num-threads 1``), the same model's real step without
   ``torch.compile`` (a fresh process), and the replay with ``--eager-regions``.

Both sides time the thread's CPU time by default (``--timer cpu``: the replay's ``--timer
cpu``, ``time.thread_time_ns`` around each real step): on the shared two-vCPU VM, loaded by
other work, a step that waited for a CPU would otherwise count the wait; one thread does all
the work, so its CPU time is the step's. ``--timer wall`` times the wall clock instead. The
trace check sets the covered original time beside the least wall time of the unprofiled step
(its least disturbed one).

Targets: every compiled region of the live capture captured as a graph; covered (captured
original time over all original op time) at least 95%; the in-step replay within
``--tolerance`` (10%) of the real compiled step and the ``--eager-regions`` replay within it
of the real eager step (medians of the repetitions' ratios); from the traces, where the
summary claims at least 95% covered, the covered original time at least 90% of the real step,
otherwise the compiled regions' time named as not covered. Exit status 1 on a miss.

    python bench/compiled_steps.py [--models mlp,gpt,conv] [--reps 3] [--quick] [--keep DIR]
                                   [--malloc recycle]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Dict, List

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _processes import pinned_cpu, quietest_cpu, use_malloc  # noqa: E402


# -- the models ------------------------------------------------------------------------------
def build(name: str, quick: bool, compiled: bool) -> Callable[[], None]:
    """One training step of model ``name`` (``compiled``: under ``torch.compile``)."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    torch.manual_seed(0)

    class FusedMLP(nn.Module):
        def __init__(self, width: int, blocks: int):
            super().__init__()
            self.blocks = nn.ModuleList(nn.Linear(width, width) for _ in range(blocks))
            self.head = nn.Linear(width, 10)

        def forward(self, x):
            for block in self.blocks:
                h = block(x)
                x = x + torch.tanh(h) * torch.sigmoid(h) * 0.5
            return self.head(x)

    class Block(nn.Module):  # pre-norm attention (SDPA, causal) and a GELU MLP
        def __init__(self, d: int, heads: int):
            super().__init__()
            self.heads = heads
            self.attention = nn.ModuleList([nn.LayerNorm(d), nn.Linear(d, 3 * d),
                                            nn.Linear(d, d)])
            self.mlp = nn.Sequential(nn.LayerNorm(d), nn.Linear(d, 4 * d), nn.GELU(),
                                     nn.Linear(4 * d, d))

        def forward(self, x):
            norm, qkv, proj = self.attention
            shape = x.shape
            heads = [z.unflatten(-1, (self.heads, -1)).transpose(1, 2)
                     for z in qkv(norm(x)).chunk(3, dim=-1)]
            y = F.scaled_dot_product_attention(*heads, is_causal=True)
            x = x + proj(y.transpose(1, 2).reshape(shape))
            return x + self.mlp(x)

    class GPT(nn.Module):
        def __init__(self, vocab: int, d: int, layers: int, seq: int):
            super().__init__()
            self.embed = nn.Embedding(vocab, d)
            self.position = nn.Parameter(torch.zeros(seq, d))
            self.blocks = nn.ModuleList(Block(d, 4) for _ in range(layers))
            self.norm = nn.LayerNorm(d)
            self.head = nn.Linear(d, vocab, bias=False)

        def forward(self, idx):
            x = self.embed(idx) + self.position
            for block in self.blocks:
                x = block(x)
            return self.head(self.norm(x))

    class ConvNet(nn.Module):
        def __init__(self, c: int):
            super().__init__()
            self.c1, self.b1 = nn.Conv2d(3, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
            self.c2, self.b2 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
            self.c3 = nn.Conv2d(c, 2 * c, 3, stride=2, padding=1, bias=False)
            self.b3 = nn.BatchNorm2d(2 * c)
            self.fc = nn.Linear(2 * c, 10)

        def forward(self, x):
            x = F.relu(self.b1(self.c1(x)))
            x = F.relu(x + self.b2(self.c2(x)))
            x = F.relu(self.b3(self.c3(x)))
            return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))

    if name == "mlp":
        width, batch = (256, 64) if quick else (1024, 256)
        model = FusedMLP(width, 4)
        x, y = torch.randn(batch, width), torch.randint(0, 10, (batch,))
        loss_of = lambda out: F.cross_entropy(out, y)  # noqa: E731
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    elif name == "gpt":
        vocab, seq = (1024, 32) if quick else (4096, 128)
        model = GPT(vocab, 128 if quick else 256, 2, seq)
        x, y = torch.randint(0, vocab, (8, seq)), torch.randint(0, vocab, (8, seq))
        loss_of = lambda out: F.cross_entropy(out.view(-1, vocab), y.view(-1))  # noqa: E731
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    elif name == "conv":
        model = ConvNet(16 if quick else 32)
        batch = 8 if quick else 32
        x, y = torch.randn(batch, 3, 32, 32), torch.randint(0, 10, (batch,))
        loss_of = lambda out: F.cross_entropy(out, y)  # noqa: E731
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    else:
        raise SystemExit(f"unknown model {name!r}")
    run = torch.compile(model) if compiled else model

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        loss_of(run(x)).backward()
        optimizer.step()
    return step


# -- one process's work ----------------------------------------------------------------------
def real_step(name: str, options, compiled: bool) -> Dict[str, float]:
    """The step unprofiled: ``steps_ms`` of it after a warm-up (compile, first-step
    allocations)."""
    import torch

    torch.set_num_threads(1)
    step = build(name, options.quick, compiled)
    for _ in range(3):
        step()
    return steps_ms(step, options.real_steps)


def steps_ms(step: Callable[[], None], count: int) -> Dict[str, float]:
    """``count`` steps timed one by one: the median wall time, the median of the thread's CPU
    time (what ``--timer cpu`` gives the replay: a step that waited for the CPU, on a loaded
    machine, does not count the wait), and the least wall time (ms)."""
    import gc
    import time

    wall, cpu = [], []
    gc.collect()
    for _ in range(count):
        start, start_cpu = time.perf_counter_ns(), time.thread_time_ns()
        step()
        cpu.append((time.thread_time_ns() - start_cpu) / 1e6)
        wall.append((time.perf_counter_ns() - start) / 1e6)
    return {"wall_ms": statistics.median(wall), "cpu_ms": statistics.median(cpu),
            "min_ms": min(wall)}


def capture(name: str, options, workdir: Path) -> Dict[str, Any]:
    """The live capture and the trace capture of the compiled step, and its real time."""
    import torch
    from torch.profiler import ExecutionTraceObserver, ProfilerActivity, profile

    from param_compute.capture.trace.execution_trace import capture_execution_trace
    from param_compute.cli.capture import capture_run

    torch.set_num_threads(1)
    step = build(name, options.quick, True)
    workload = capture_run(step, warmup=2, steps=1, source=f"bench {name}",
                           repeats=options.real_steps)
    workload.target_device = "cpu"
    workload.write(workdir / f"{name}.json")
    live = {"regions": workload.compiled_regions(), "coverage": workload.time_coverage(),
            "summary": workload.summary_lines(),
            "skipped": [s.to_json() for s in workload.skipped]}
    et_path, kineto_path = workdir / f"{name}_et.json", workdir / f"{name}_kineto.json"
    observer = ExecutionTraceObserver().register_callback(str(et_path))
    with profile(activities=[ProfilerActivity.CPU], execution_trace_observer=observer) as prof:
        prof.add_metadata("num_threads", str(torch.get_num_threads()))
        with torch.profiler.record_function("ProfilerStep#1"):
            step()
    prof.export_chrome_trace(str(kineto_path))
    traced = capture_execution_trace(et_path, kineto=kineto_path, target_device="cpu")
    traced.write(workdir / f"{name}_trace.json")
    trace = {"coverage": traced.time_coverage(), "regions": traced.compiled_regions(),
             "summary": traced.summary_lines()}
    return {"live": live, "trace": trace, "real": steps_ms(step, options.real_steps)}


def _child(argv: List[str]) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(REPO)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])))
    return subprocess.run([sys.executable, *argv], env=env, capture_output=True, text=True)


def in_child(name: str, what: str, options, workdir: Path, into: Path) -> Dict[str, Any]:
    """``capture``, ``compiled`` or ``eager`` (a real step) in a fresh process."""
    argv = [str(Path(__file__).resolve()), "--one", name, "--what", what, "--into", str(into),
            "--keep", str(workdir), "--real-steps", str(options.real_steps)] \
        + (["--quick"] if options.quick else [])
    run = _child(argv)
    if run.returncode != 0 or not into.exists():
        raise SystemExit(f"{name} {what} failed ({run.returncode}):\n{run.stderr[-3000:]}")
    return json.loads(into.read_text())


def replay(spec: Path, results: Path, eager: bool, options) -> Dict[str, Any]:
    """``run --replay-step`` (``eager``: ``--eager-regions``; ``--timer``) in a fresh
    process, and its ledger (``totals --json``)."""
    run = _child(["-m", "param_compute.run_benchmark", "-c", str(spec), "--replay-step",
                  "--num-threads", "1", "--output", str(results), "--no-progress",
                  "--max-memory", "none", "-q", "--timer", options.timer,
                  "--max-time", str(options.max_time)]
                 + (["--eager-regions"] if eager else []))
    if run.returncode not in (0, 1) or not results.exists():
        raise SystemExit(f"run_benchmark failed ({run.returncode}):\n{run.stderr[-3000:]}")
    totals = _child(["-m", "param_compute.workload_totals", "--json", str(results)])
    if totals.returncode != 0:
        raise SystemExit(f"workload_totals failed:\n{totals.stderr[-3000:]}")
    ledger = json.loads(totals.stdout)
    for line in results.read_text().splitlines():
        record = json.loads(line)
        if record.get("kind") == "step":
            ledger["graphs"] = (record.get("step") or {}).get("graphs")
    return ledger


# -- judging ---------------------------------------------------------------------------------
def measure(name: str, options, workdir: Path) -> Dict[str, Any]:
    captured = in_child(name, "capture", options, workdir, workdir / f"{name}.capture.out")
    reps = []
    side = "cpu_ms" if options.timer == "cpu" else "wall_ms"
    for rep in range(options.reps):
        real_c = in_child(name, "compiled", options, workdir, workdir / f"{name}.c{rep}")
        step_c = replay(workdir / f"{name}.json", workdir / f"{name}_r{rep}.json", False,
                        options)
        real_e = in_child(name, "eager", options, workdir, workdir / f"{name}.e{rep}")
        step_e = replay(workdir / f"{name}.json", workdir / f"{name}_e{rep}.json", True,
                        options)
        reps.append({"real_compiled": real_c[side], "in_step": step_c["in_step_ms"],
                     "real_eager": real_e[side], "in_step_eager": step_e["in_step_ms"],
                     "real_compiled_wall": real_c["wall_ms"], "real_eager_wall": real_e["wall_ms"],
                     "ledger": step_c, "ledger_eager": step_e})
        print(f"  {name} rep {rep + 1} ({options.timer} time): compiled real "
              f"{real_c[side]:.2f} ms, in-step {step_c['in_step_ms']:.2f}; eager real "
              f"{real_e[side]:.2f} ms, --eager-regions in-step {step_e['in_step_ms']:.2f} "
              f"(load average {os.getloadavg()[0]:.1f})", flush=True)
    return {"name": name, "captured": captured, "reps": reps}


def judge(result: Dict[str, Any], options) -> Dict[str, Any]:
    live, trace = result["captured"]["live"], result["captured"]["trace"]
    regions = live["regions"] or {"count": 0, "captured_as_graphs": 0}
    cover = live["coverage"]
    covered = cover["captured_us"]["cpu"] / cover["total_us"]["cpu"] \
        if cover["total_us"]["cpu"] else None
    ratios = [r["in_step"] / r["real_compiled"] for r in result["reps"] if r["in_step"]]
    eager = [r["in_step_eager"] / r["real_eager"] for r in result["reps"] if r["in_step_eager"]]
    ratio, eager_ratio = statistics.median(ratios), statistics.median(eager)
    t_cover = trace["coverage"]
    claimed = t_cover["captured_us"]["cpu"] / t_cover["total_us"]["cpu"] \
        if t_cover["total_us"]["cpu"] else 0.0
    real_ms = result["captured"]["real"]["min_ms"]  # the least disturbed unprofiled step
    covered_ms = t_cover["captured_us"]["cpu"] / 1e3
    t_regions = trace["regions"] or {}
    named = (t_regions.get("not_covered_us") or {}).get("cpu") or 0.0
    trace_ok = covered_ms >= 0.9 * real_ms if claimed >= 0.95 else named > 0
    return {"name": result["name"], "regions": regions,
            "graphs_ok": regions["count"] >= 1
            and regions["captured_as_graphs"] == regions["count"],
            "covered": covered, "covered_ok": covered is not None and covered >= 0.95,
            "real_compiled": statistics.median(r["real_compiled"] for r in result["reps"]),
            "in_step": statistics.median(r["in_step"] for r in result["reps"]),
            "ratio": ratio, "ratios": ratios,
            "step_ok": abs(ratio - 1) <= options.tolerance,
            "real_eager": statistics.median(r["real_eager"] for r in result["reps"]),
            "in_step_eager": statistics.median(r["in_step_eager"] for r in result["reps"]),
            "eager_ratio": eager_ratio, "eager_ratios": eager,
            "eager_ok": abs(eager_ratio - 1) <= options.tolerance,
            "trace_claimed": claimed, "trace_covered_ms": covered_ms, "trace_real_ms": real_ms,
            "trace_named_ms": named / 1e3, "trace_regions": t_regions, "trace_ok": trace_ok,
            "ledger": result["reps"][-1]["ledger"],
            "ledger_eager": result["reps"][-1]["ledger_eager"]}


def print_tables(verdicts: List[Dict[str, Any]]) -> None:
    def mark(ok: bool) -> str:
        return "" if ok else " MISS"

    print("\n| model | compiled regions (graphs ran) | captured as graphs | covered | "
          "real compiled step (ms) | in-step replay (ms) | in-step / real (reps) | "
          "real eager step (ms) | --eager-regions in-step (ms) | eager in-step / real (reps) |")
    print("| --- " * 10 + "|")
    for v in verdicts:
        r = v["regions"]
        print(f"| {v['name']} | {r['count']} | {r['captured_as_graphs']}{mark(v['graphs_ok'])} "
              f"| {100 * (v['covered'] or 0):.1f}%{mark(v['covered_ok'])} | "
              f"{v['real_compiled']:.2f} | {v['in_step']:.2f} | **{v['ratio']:.2f}** ("
              + ", ".join(f"{x:.2f}" for x in v["ratios"]) + f"){mark(v['step_ok'])} | "
              f"{v['real_eager']:.2f} | {v['in_step_eager']:.2f} | **{v['eager_ratio']:.2f}** ("
              + ", ".join(f"{x:.2f}" for x in v["eager_ratios"]) + f"){mark(v['eager_ok'])} |")
    print("\nFrom the traces (execution trace + Kineto of one compiled step, capture --from-et "
          "--kineto):")
    print("| model | summary claims covered | covered original (ms) | real step (ms) | "
          "compiled regions | their time not covered, named (ms) | verdict |")
    print("| --- " * 7 + "|")
    for v in verdicts:
        t = v["trace_regions"]
        names = "; ".join(f"{row['region']} {row['not_covered_us']['cpu'] / 1e3:.2f}"
                          for row in t.get("regions", []))
        print(f"| {v['name']} | {100 * v['trace_claimed']:.1f}% | {v['trace_covered_ms']:.2f} | "
              f"{v['trace_real_ms']:.2f} | {t.get('count', 0)} | {v['trace_named_ms']:.2f} "
              f"({names}) | {'ok' if v['trace_ok'] else 'MISS'} |")
    for v in verdicts:
        print(f"\n{v['name']}: per region (ledger of the last repetition; ms per step)")
        print("| op | original | in-step (compiled) | isolated (compiled) | "
              "in-step (--eager-regions) | isolated (--eager-regions) |")
        print("| --- " * 6 + "|")
        eager = {row["op"]: row for row in v["ledger_eager"]["ops"]}
        for row in v["ledger"]["ops"]:
            if not row["op"].startswith("graph::"):
                continue
            other = eager.get(row["op"], {})

            def fmt(value):
                return f"{value:.2f}" if value is not None else "-"
            print(f"| {row['op']} | {fmt(row['original_ms'])} | {fmt(row['in_step_ms'])} | "
                  f"{fmt(row['isolated_ms'])} | {fmt(other.get('in_step_ms'))} | "
                  f"{fmt(other.get('isolated_ms'))} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="mlp,gpt,conv")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--real-steps", type=int, default=15)
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke test")
    parser.add_argument("--tolerance", type=float, default=0.10)
    parser.add_argument("--timer", choices=("cpu", "wall"), default="cpu",
                        help="what both sides time: the thread's CPU time (default; the replay's "
                             "--timer cpu: on the shared VM a step that waited for a CPU does "
                             "not count the wait) or the wall clock")
    parser.add_argument("--max-time", type=float, default=2.0,
                        help="the replay's --max-time (s): a step of tens of ms gets enough "
                             "samples for its median")
    parser.add_argument("--malloc", choices=("default", "recycle"), default="default",
                        help="recycle: every process (captures, real steps, replays) runs with "
                             "glibc tunables that keep freed memory, as jemalloc or tcmalloc "
                             "would (bench/replay_models.py's --malloc)")
    parser.add_argument("--keep", type=Path, help="keep the specs, traces and results here")
    parser.add_argument("--no-pin", action="store_true",
                        help="leave every process to the scheduler (by default all run on the "
                             "CPU that was quietest at the start)")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--what", help=argparse.SUPPRESS)
    parser.add_argument("--into", type=Path, help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.one:
        if options.what == "capture":
            result = capture(options.one, options, options.keep)
        else:
            result = real_step(options.one, options, options.what == "compiled")
        options.into.write_text(json.dumps(result))
        return 0
    allocator = use_malloc(options.malloc)  # inherited by every child process
    verdicts = []
    cpu = None if options.no_pin else quietest_cpu()
    with tempfile.TemporaryDirectory() as tmp, pinned_cpu(cpu):
        workdir = options.keep or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        # Inductor's compiled code shared by every process of the run, nowhere else
        os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(workdir / "inductor"))
        for name in options.models.split(","):
            print(f"{name}: capturing, then {options.reps} repetitions", flush=True)
            verdicts.append(judge(measure(name, options, workdir), options))
    print_tables(verdicts)
    import torch

    missed = [v["name"] for v in verdicts if not all(
        v[key] for key in ("graphs_ok", "covered_ok", "step_ok", "eager_ok", "trace_ok"))]
    print(f"\ntorch {torch.__version__}, cpu, 1 thread, "
          f"{'every process on CPU ' + str(cpu) if cpu is not None else 'unpinned'}, allocator "
          f"{allocator}, "
          f"load average {os.getloadavg()[0]:.1f}")
    if missed:
        print(f"MISS: {', '.join(missed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
