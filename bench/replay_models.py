"""Does a step replay predict production? Four models' real steps against their replays.

Four models built here (no downloads), each trained one step at a time with one torch thread:

* ``resnet18``: a ResNet-18 (basic blocks 2-2-2-2, 64 to 512 channels), batch 8 at 112x112,
  cross-entropy, SGD with momentum;
* ``gpt2``: a 4-layer GPT-2 (d 256, 4 heads, sequence 128, batch 8, vocabulary 8192),
  forward and backward, SGD;
* ``lstm``: a 2-layer LSTM language model (vocabulary 10000, 256 wide, 35 steps, batch 20),
  Adam;
* ``dlrm``: a DLRM-like model: 8 ``EmbeddingBag`` tables of 100000 x 64 (sum, 20 lookups per
  bag), bottom MLP 13-512-256-64, dot interactions, top MLP 512-256-1, batch 256, SGD;
* ``mlp`` (not in the default list): 8 blocks of Linear 64-64, LayerNorm, GELU at batch 4,
  Adam: a host-bound step of ~470 small calls, where the replay's own cost per call counts;
* ``vit``, ``mobilenet``, ``moe``, ``unet``, ``tbe`` (not in the default list): issue 31's five
  families, built in ``model_families.py``.

``--capture trace`` records the first repetition's step with the execution-trace observer and
Kineto and captures it from the traces (no values: a top-2 MoE's subnormal Adam state reads
ordinary; ``--subnormal-state F`` is the capture's remedy) instead of ``capture --run``'s live
capture; the real side is timed the same way either way. Every process starts after a core is
free of other load (``--gate-s``), and the table says how many did.

Per model, ``--reps`` repetitions of [a fresh process building the model, capturing it the
first time (``capture --run`` in library form: the real step timed unprofiled, each op timed
in place, then captured with its dataflow) and timing its real step unprofiled (median of
``--real-steps``) and each op in place with its page faults; then ``run_benchmark -c SPEC
--replay-step --num-threads 1`` in a fresh process and ``workload_totals --json`` on its
results]: real steps and replays interleaved, each side sampled over as many processes. The
replay measures with the default protocol (at least 5 steps, by time and noise) unless
``-w``/``-i`` give PARAM's counts. Targets (median over repetitions): the in-step replay within
``--step-tolerance`` (10%) of the real step; the replayed step of each repetition within
``--replay-spread`` (5%) of their median (one replay to the next); per op above 2% of the
step, the in-step time within ``--op-tolerance`` (25%) of the original (each op timed in place
in the real step). Exit status 1 on a miss (the table says which).

    python bench/replay_models.py [--models resnet18,gpt2,lstm,dlrm] [--reps 3] [--quick]
                                  [--device cuda] [--batch-scale 8] [--malloc recycle]
                                  [--host-gaps auto|on|off|both] [--capture live|trace]
                                  [--subnormal-state F]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict, List

import torch
import torch.nn as nn
import torch.nn.functional as F

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _processes import (pinned_cpu, quietest_cpu, use_malloc,  # noqa: E402
                        wait_quiet)
from model_families import FAMILIES, NAMESPACES, build_family  # noqa: E402

from param_compute.capture.live.timing import time_ops_in_place, time_step  # noqa: E402
from param_compute.cli.capture import capture_run  # noqa: E402


# -- the models ------------------------------------------------------------------------------
class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                      nn.BatchNorm2d(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + (x if self.down is None else self.down(x)))


class ResNet18(nn.Module):
    def __init__(self, width: int = 64, classes: int = 1000):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 7, 2, 3, bias=False), nn.BatchNorm2d(width),
                                  nn.ReLU(), nn.MaxPool2d(3, 2, 1))
        layers, cin = [], width
        for index, cout in enumerate([width, 2 * width, 4 * width, 8 * width]):
            stride = 1 if index == 0 else 2
            layers += [BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)]
            cin = cout
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        x = self.layers(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class Block(nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / (d // self.heads) ** 0.5)
        mask = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, d)
        x = x + self.proj(y)
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class GPT2(nn.Module):
    def __init__(self, layers: int = 4, d: int = 256, heads: int = 4, vocab: int = 8192,
                 seq: int = 128):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(seq, d)
        self.blocks = nn.Sequential(*[Block(d, heads) for _ in range(layers)])
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        positions = torch.arange(idx.shape[1], device=idx.device)
        return self.head(self.ln(self.blocks(self.tok(idx) + self.pos(positions))))


class LstmLM(nn.Module):
    def __init__(self, vocab: int = 10000, d: int = 256, layers: int = 2):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.lstm = nn.LSTM(d, d, layers, batch_first=False)
        self.out = nn.Linear(d, vocab)

    def forward(self, tokens):
        hidden, _ = self.lstm(self.emb(tokens))
        return self.out(hidden)


class DLRM(nn.Module):
    def __init__(self, tables: int = 8, rows: int = 100_000, dim: int = 64, dense: int = 13):
        super().__init__()
        self.embeddings = nn.ModuleList(nn.EmbeddingBag(rows, dim, mode="sum")
                                        for _ in range(tables))
        self.bottom = nn.Sequential(nn.Linear(dense, 512), nn.ReLU(), nn.Linear(512, 256),
                                    nn.ReLU(), nn.Linear(256, dim), nn.ReLU())
        pairs = (tables + 1) * tables // 2
        self.top = nn.Sequential(nn.Linear(dim + pairs, 512), nn.ReLU(), nn.Linear(512, 256),
                                 nn.ReLU(), nn.Linear(256, 1))

    def forward(self, dense, indices, offsets):
        x = self.bottom(dense)
        features = [x] + [table(indices[i], offsets[i]) for i, table in
                          enumerate(self.embeddings)]
        t = torch.stack(features, dim=1)
        z = torch.bmm(t, t.transpose(1, 2))
        rows, cols = torch.tril_indices(t.shape[1], t.shape[1], offset=-1, device=t.device)
        return self.top(torch.cat([x, z[:, rows, cols]], dim=1))


def _training_step(model: nn.Module, optimizer, loss_of: Callable[[], torch.Tensor]):
    def step():
        optimizer.zero_grad(set_to_none=True)
        loss = loss_of()
        loss.backward()
        optimizer.step()
    return step


def build(name: str, quick: bool, device: str, scale: int = 1) -> Callable[[], None]:
    """One training step of model ``name``; ``scale`` multiplies its batch."""
    torch.manual_seed(0)
    if name == "resnet18":
        model = ResNet18(16 if quick else 64, 100 if quick else 1000).to(device)
        size = 32 if quick else 112
        x = torch.randn(8 * scale, 3, size, size, device=device)
        y = torch.randint(0, 100 if quick else 1000, (8 * scale,), device=device)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        return _training_step(model, optimizer, lambda: F.cross_entropy(model(x), y))
    if name == "gpt2":
        seq, vocab = (32, 512) if quick else (128, 8192)
        model = GPT2(2 if quick else 4, 64 if quick else 256, 4, vocab, seq).to(device)
        idx = torch.randint(0, vocab, (8 * scale, seq), device=device)
        target = torch.randint(0, vocab, (8 * scale, seq), device=device)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        return _training_step(model, optimizer, lambda: F.cross_entropy(
            model(idx).view(-1, vocab), target.view(-1)))
    if name == "lstm":
        vocab, width, steps = (1000, 64, 10) if quick else (10000, 256, 35)
        model = LstmLM(vocab, width).to(device)
        tokens = torch.randint(0, vocab, (steps, 20 * scale), device=device)
        target = torch.randint(0, vocab, (steps, 20 * scale), device=device)
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
        return _training_step(model, optimizer, lambda: F.cross_entropy(
            model(tokens).view(-1, vocab), target.view(-1)))
    if name == "dlrm":
        rows, batch = (10_000, 64) if quick else (100_000, 256)
        batch *= scale
        model = DLRM(8, rows).to(device)
        dense = torch.randn(batch, 13, device=device)
        indices = [torch.randint(0, rows, (batch * 20,), device=device) for _ in range(8)]
        offsets = [torch.arange(0, batch * 20, 20, device=device) for _ in range(8)]
        label = torch.rand(batch, 1, device=device)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        return _training_step(model, optimizer, lambda: F.binary_cross_entropy_with_logits(
            model(dense, indices, offsets), label))
    if name == "mlp":  # a host-bound step of small ops: the replay's own cost per call shows
        layers: List[nn.Module] = []
        for _ in range(8):
            layers += [nn.Linear(64, 64), nn.LayerNorm(64), nn.GELU()]
        model = nn.Sequential(*layers, nn.Linear(64, 10)).to(device)
        x = torch.randn(4 * scale, 64, device=device)
        y = torch.randint(0, 10, (4 * scale,), device=device)
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
        return _training_step(model, optimizer, lambda: F.cross_entropy(model(x), y))
    if name in FAMILIES:  # issue 31's five families (bench/model_families.py)
        return build_family(name, quick, device, scale)
    raise SystemExit(f"unknown model {name!r}")


# -- the protocol ----------------------------------------------------------------------------
def _child(args: List[str]) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(REPO)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])))
    return subprocess.run([sys.executable, "-m", *args], env=env, capture_output=True,
                          text=True)


def replay_once(spec: Path, results: Path, options, host_gaps: str,
                namespaces=()) -> Dict[str, Any]:
    counts = [] if options.warmup is None and options.iters is None else [
        "-w", str(2 if options.warmup is None else options.warmup),
        "-i", str(5 if options.iters is None else options.iters)]  # else: the default protocol
    run = _child(["param_compute.run_benchmark", "-c", str(spec), "--replay-step",
                  "--num-threads", "1", *counts,
                  "-d", options.device, "--output", str(results), "--no-progress",
                  "--no-throughput", "--max-memory", "none", "--host-gaps", host_gaps,
                  *[f"--allow-namespace={ns}" for ns in namespaces]])
    if run.returncode not in (0, 1) or not results.exists():
        raise SystemExit(f"run_benchmark failed ({run.returncode}):\n{run.stderr[-3000:]}")
    totals = _child(["param_compute.workload_totals", "--json", str(results)])
    if totals.returncode != 0:
        raise SystemExit(f"workload_totals failed:\n{totals.stderr[-3000:]}")
    return json.loads(totals.stdout)



def measure_real(name: str, options, workdir: Path, capture: bool) -> Dict[str, Any]:
    """In this process: build the model, capture it (``capture``: the first repetition), then
    time its real step unprofiled and each op in place with its page faults."""
    torch.set_num_threads(1)
    step = build(name, options.quick, options.device, options.batch_scale)
    out: Dict[str, Any] = {}
    if capture and options.capture == "trace":
        started = time.perf_counter()
        trace_capture(name, step, workdir, options.subnormal_state)
        out["capture_s"] = time.perf_counter() - started
    elif capture:
        started = time.perf_counter()
        workload = capture_run(step, warmup=2, steps=1, source=f"bench {name}",
                               repeats=options.real_steps,
                               allow_namespaces=NAMESPACES.get(name, ()))
        workload.write(workdir / f"{name}.json")
        out["capture_s"] = time.perf_counter() - started
    else:
        for _ in range(2):  # the capture's warm-up
            step()
    out["real"] = statistics.median(time_step(step, options.real_steps)) / 1e3
    in_place: Dict[str, float] = {}
    in_place_faults: Dict[str, float] = {}
    faults: Dict[str, List[float]] = {}
    for func, times in time_ops_in_place(step, 1, passes=3, faults=faults).items():
        namespace, base = func.split(".")[:2]
        op = f"{namespace}::{base}"
        in_place[op] = in_place.get(op, 0.0) + sum(times) / 1e3
        in_place_faults[op] = in_place_faults.get(op, 0.0) + sum(faults.get(func, []))
    out["in_place"], out["in_place_faults"] = in_place, in_place_faults
    return out


def trace_capture(name: str, step: Callable[[], None], workdir: Path,
                  subnormal_state=None) -> None:
    """Warm the step up, record one step with the execution-trace observer and Kineto (as the
    issue's measurements did), and capture the spec and step file from the two traces: no
    values are seen, only shapes, dataflow and profiled times."""
    from torch.profiler import ExecutionTraceObserver, ProfilerActivity, profile

    from param_compute.capture import capture_execution_trace

    for _ in range(2):
        step()
    et_path, kineto_path = workdir / f"{name}_et.json", workdir / f"{name}_kineto.json"
    observer = ExecutionTraceObserver().register_callback(str(et_path))
    with profile(activities=[ProfilerActivity.CPU], execution_trace_observer=observer) as prof:
        prof.add_metadata("num_threads", str(torch.get_num_threads()))
        step()
    prof.export_chrome_trace(str(kineto_path))
    workload = capture_execution_trace(et_path, kineto=kineto_path, source=f"bench {name}",
                                       allow_namespaces=NAMESPACES.get(name, ()),
                                       target_device="cpu", subnormal_state=subnormal_state)
    workload.write(workdir / f"{name}.json")


def measure_in_child(name: str, options, workdir: Path, rep: int) -> Dict[str, Any]:
    """``measure_real`` in a fresh process, as the model runs in production. Each repetition
    gets its own: which memory glibc's allocator recycles, and so how many pages a step
    touches first, differs from process to process (the same LSTM step's ``_log_softmax``
    took 5.5 ms with recycled memory in one and 14 ms with 6,836 first touches in the next),
    on the real side as on the replay's, so both are sampled over as many processes."""
    into = workdir / f"{name}.real{rep}.json"
    argv = [sys.executable, str(Path(__file__).resolve()), "--one", name, "--rep", str(rep),
            "--into", str(into), "--keep", str(workdir),
            "--real-steps", str(options.real_steps), "--device", options.device,
            "--batch-scale", str(options.batch_scale), "--capture", options.capture] \
        + (["--subnormal-state", str(options.subnormal_state)] if options.subnormal_state
           else []) \
        + (["--quick"] if options.quick else [])
    run = subprocess.run(argv)
    if run.returncode != 0 or not into.exists():
        raise SystemExit(f"measuring {name} failed ({run.returncode})")
    return json.loads(into.read_text())


def measure_model(name: str, options, workdir: Path) -> Dict[str, Any]:
    """Per repetition, in fresh processes: the real step (and the capture, first), then its
    replay."""
    reps, capture_s = [], None
    for rep in range(options.reps):
        gate = [wait_quiet(timeout_s=options.gate_s)]  # a core free before each process
        real = measure_in_child(name, options, workdir, rep)
        gate.append(wait_quiet(timeout_s=options.gate_s))
        capture_s = real.get("capture_s", capture_s)
        both = options.host_gaps == "both"
        ledger = replay_once(workdir / f"{name}.json", workdir / f"{name}_{rep}.json", options,
                             "on" if both else options.host_gaps, NAMESPACES.get(name, ()))
        if both:  # the same capture replayed back to back too, beside it
            ledger["gaps_off_ms"] = replay_once(workdir / f"{name}.json",
                                                workdir / f"{name}_{rep}_off.json", options,
                                                "off", NAMESPACES.get(name, ()))["in_step_ms"]
        ledger["in_place"] = real["in_place"]
        ledger["in_place_faults"] = real["in_place_faults"]
        ledger["gate"] = gate
        reps.append((real["real"], ledger))
        print(f"  {name} rep {rep + 1}: real {real['real']:.2f} ms, in-step "
              f"{ledger['in_step_ms']:.2f} ms, isolated {ledger['isolated_ms']:.2f} ms"
              + ("" if all(gate) else " (started without a free core)"), flush=True)
    return {"name": name, "capture_s": capture_s, "reps": reps}


def _median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def _op_entry() -> Dict[str, List[float]]:
    return {"original": [], "in_step": [], "isolated": [], "original_faults": [],
            "in_step_faults": []}


def _trace_level(op: str, replayed: set) -> str:
    """The op a trace capture replays in place of ``op`` (timed in place below autograd):
    fbgemm's TBE forward kernel is taken from a trace with its autograd function
    (``split_embedding_codegen_lookup_*_function_pt2``), which a live capture opens up."""
    if op in replayed or not op.startswith("fbgemm::split_embedding_codegen_forward_"):
        return op
    lookups = [name for name in replayed
               if name.startswith("fbgemm::split_embedding_codegen_lookup_")]
    return lookups[0] if len(lookups) == 1 else op


def judge(result: Dict[str, Any], options) -> Dict[str, Any]:
    reps = result["reps"]
    real = _median([r for r, _ in reps])
    in_step = _median([ledger["in_step_ms"] for _, ledger in reps])
    ratios = [ledger["in_step_ms"] / r for r, ledger in reps if ledger["in_step_ms"]]
    ledger = reps[-1][1]
    ops: Dict[str, Dict[str, List[float]]] = {}
    for _, rep_ledger in reps:
        for row in rep_ledger["ops"]:
            entry = ops.setdefault(row["op"], _op_entry())
            for key, field in (("in_step", "in_step_ms"), ("isolated", "isolated_ms"),
                               ("in_step_faults", "in_step_faults")):
                if row[field] is not None:
                    entry[key].append(row[field])
        replayed = {row["op"] for row in rep_ledger["ops"]}
        for op, original in rep_ledger["in_place"].items():  # timed in place beside the replay
            entry = ops.setdefault(_trace_level(op, replayed), _op_entry())
            entry["original"].append(original)
            entry["original_faults"].append(rep_ledger["in_place_faults"].get(op))
    checked, misses = [], []
    for op, entry in ops.items():
        original = _median(entry["original"])
        if original is None or original < 0.02 * real:
            continue
        step_ms = _median(entry["in_step"])
        ratio = step_ms / original if step_ms else None
        row = (op, original, step_ms, _median(entry["isolated"]), ratio,
               _median(entry["original_faults"]), _median(entry["in_step_faults"]))
        checked.append(row)
        if ratio is None or abs(ratio - 1) > options.op_tolerance:
            misses.append(row)
    ratio = _median(ratios)
    steps = [ledger["in_step_ms"] for _, ledger in reps if ledger["in_step_ms"]]
    spread = max(abs(v / in_step - 1) for v in steps) if steps and in_step else None
    off = [l["gaps_off_ms"] / r for r, l in reps if l.get("gaps_off_ms")]
    in_place = _median([sum(l["in_place"].values()) for _, l in reps])
    gates = [held for _, l in reps for held in l.get("gate", [])]
    return {"name": result["name"], "real": real, "in_step": in_step, "ratio": ratio,
            "in_place": in_place, "gate": (sum(gates), len(gates)),
            "ratios": ratios, "off_ratios": off, "isolated": _median([l["isolated_ms"] for _, l in reps]),
            "original": ledger["original_ms"], "covered": ledger["covered_fraction"],
            "checked": checked, "misses": misses, "spread": spread,
            "spread_ok": spread is not None and spread <= options.replay_spread,
            "step_ok": ratio is not None and abs(ratio - 1) <= options.step_tolerance,
            "ledger": ledger}


def print_tables(verdicts: List[Dict[str, Any]], options) -> None:
    def fmt(value, spec=".2f"):
        return format(value, spec) if value is not None else "-"

    both = options.host_gaps == "both"
    print("\n| model | real step (ms) | ops timed in place (ms) | in-step replay (ms) | "
          "in-step / real (reps) | replays ± | gate held | "
          + ("host gaps off: in-step / real | " if both else "")
          + "isolated Σ median×count (ms) | original op time at capture "
          f"(ms) | covered | ops >2% within ±{int(100 * options.op_tolerance)}% |")
    print("| --- " * (12 if both else 11) + "|")
    for v in verdicts:
        reps = ", ".join(f"{r:.2f}" for r in v["ratios"])
        off = (f"{fmt(_median(v['off_ratios']))} ("
               + ", ".join(f"{r:.2f}" for r in v["off_ratios"]) + ") | ") if both else ""
        print(f"| {v['name']} | {fmt(v['real'])} | {fmt(v['in_place'])} | {fmt(v['in_step'])} | "
              f"**{fmt(v['ratio'])}** ({reps}){'' if v['step_ok'] else ' MISS'} | "
              f"{fmt(100 * v['spread'] if v['spread'] is not None else None, '.1f')}%"
              f"{'' if v['spread_ok'] else ' MISS'} | {v['gate'][0]} of {v['gate'][1]} | {off}"
              f"{fmt(v['isolated'])} | {fmt(v['original'])} | "
              f"{fmt(100 * v['covered'] if v['covered'] is not None else None, '.1f')}% | "
              f"{len(v['checked']) - len(v['misses'])} of {len(v['checked'])} |")
    for v in verdicts:
        if not v["checked"]:
            continue
        print(f"\n{v['name']}: ops above 2% of the step (median over repetitions; original: "
              "timed in place beside each replay; reason from the last ledger)")
        print("| op | original ms | in-step ms | isolated ms | in-step / original | "
              "page faults per step, original / in-step | reason |")
        print("| --- | --- | --- | --- | --- | --- | --- |")
        reasons = {row["op"]: row["reason"] for row in v["ledger"]["ops"]}
        for row in sorted(v["checked"], key=lambda r: -r[1]):
            op, original, step_ms, isolated, ratio, faults, step_faults = row
            miss = " MISS" if row in v["misses"] else ""
            print(f"| {op} | {original:.2f} | {fmt(step_ms)} | {fmt(isolated)} | "
                  f"{fmt(ratio)}{miss} | {fmt(faults, '.0f')} / {fmt(step_faults, '.0f')} | "
                  f"{reasons.get(op, '')} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="resnet18,gpt2,lstm,dlrm")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--real-steps", type=int, default=5)
    parser.add_argument("-w", "--warmup", type=int, default=None,
                        help="the replay's -w (with -i: PARAM's counts; neither: the default "
                             "protocol, by time and noise)")
    parser.add_argument("-i", "--iters", type=int, default=None, help="the replay's -i")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke test")
    parser.add_argument("--malloc", choices=("default", "recycle"), default="default",
                        help="recycle: every process (real steps, replays) runs with glibc "
                             "tunables that keep freed memory (no trimming, a fixed mmap "
                             "threshold), as jemalloc or tcmalloc would: first touches of "
                             "fresh pages no longer differ from process to process")
    parser.add_argument("--batch-scale", type=int, default=1,
                        help="multiply each model's batch (on a GPU the default batches give "
                             "launch-bound steps of 5-11 ms)")
    parser.add_argument("--host-gaps", choices=("auto", "on", "off", "both"), default="auto",
                        help="the replay's --host-gaps: keep the original host's time between "
                             "calls (auto: on a device only); both: judge with them on, and "
                             "replay each capture with them off too, in a column beside")
    parser.add_argument("--step-tolerance", type=float, default=0.10)
    parser.add_argument("--op-tolerance", type=float, default=0.25)
    parser.add_argument("--replay-spread", type=float, default=0.05,
                        help="the replayed step's largest distance from its median over the "
                             "repetitions (each a fresh process replaying the same capture)")
    parser.add_argument("--gate-s", type=float, default=60.0,
                        help="before each process (real step, replay), wait up to this long "
                             "for a core free of other load (_processes.wait_quiet); the table "
                             "says how many started with one")
    parser.add_argument("--capture", choices=("live", "trace"), default="live",
                        help="live: capture --run's library form (values profiled, each op "
                             "timed in place); trace: one step recorded with the execution-"
                             "trace observer and Kineto, captured from the traces (no values)")
    parser.add_argument("--subnormal-state", type=float, default=None,
                        help="--capture trace: capture --from-et's --subnormal-state (the share "
                             "of the optimizer state's values that are subnormal)")
    parser.add_argument("--keep", type=Path, help="keep the specs and results in this folder")
    parser.add_argument("--no-pin", action="store_true",
                        help="leave every process to the scheduler; by default all of them (real "
                             "steps and replays) run on the one CPU that was quietest at the "
                             "start: this VM's two vCPUs differ by up to 20%% for minutes "
                             "(_processes.pinned_cpu), which would read as a replay's spread")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # the child timing one real step
    parser.add_argument("--rep", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--into", type=Path, help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.one:
        result = measure_real(options.one, options, options.keep, capture=options.rep == 0)
        options.into.write_text(json.dumps(result))
        return 0
    allocator = use_malloc(options.malloc)  # inherited by every child process
    verdicts = []
    cpu = None if options.no_pin else quietest_cpu()
    with tempfile.TemporaryDirectory() as tmp, pinned_cpu(cpu):
        workdir = options.keep or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        for name in options.models.split(","):
            print(f"{name}: capturing and replaying", flush=True)
            verdicts.append(judge(measure_model(name, options, workdir), options))
    print_tables(verdicts, options)
    missed = [v["name"] for v in verdicts
              if not v["step_ok"] or not v["spread_ok"] or v["misses"]]
    print(f"\n{torch.__version__}, device {options.device}, 1 thread, "
          f"{'every process on CPU ' + str(cpu) if cpu is not None else 'unpinned'}, allocator "
          f"{allocator}; "
          + (f"MISSED: {', '.join(missed)}" if missed else "all targets met"))
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
