"""Distributed steps captured from both ranks' traces and replayed as the job they were.

    python bench/dist_steps.py [--models ddp,fsdp,mpemb] [--reps 11] [--out DIR] [--quick]

Three 2-rank CPU jobs built here (gloo, one torch thread a rank), each a training step:

* ``ddp``: an MLP of 4 Linear 1024-1024 + ReLU layers (batch 256) under
  ``DistributedDataParallel`` (its gradients all-reduced in buckets, overlapping backward);
* ``fsdp``: the same MLP under FSDP2 (``fully_shard`` on each Linear and on the model): each
  layer's parameters all-gathered before its forward and backward (``fsdp::all_gather_copy_in``,
  ``c10d::_allgather_base_``, ``fsdp::split_with_sizes_copy``), gradients reduce-scattered
  (``fsdp::chunk_cat``, ``c10d::_reduce_scatter_base_``);
* ``mpemb``: model-parallel embeddings: 8 ``EmbeddingBag`` tables of 50000 x 64 (sum, 20
  lookups a bag), 4 on each rank, looked up for the whole batch of 512, the pooled rows
  exchanged with ``all_to_all_single`` (each rank then holds its half of the batch for every
  table; the gradients go back the same way), a DDP top MLP 512-512-256-1, SGD.

Per model: each rank records, after 3 warm steps, a Kineto trace of 40 steps (the original
times: without the execution-trace observer, whose cost per call would inflate them) and
then one step under the execution-trace observer alone (the calls and their dataflow), a
barrier before each step; ``param-compute capture`` joins both ranks' traces into one spec
(``--from-et A --kineto KA --from-et B --kineto KB``), each call to its 40 occurrences by name. Then
``--reps`` repetitions interleaved of [from the second on, both ranks recorded and captured
again: each collective's original time (its calls' ``comm_us``) in that
recording; a collective's original is the median over the recordings, the first included],
[the real step: fresh ranks build the model, warm up, and time ``--real-steps`` steps
unprofiled, a barrier before each, per rank the median; the job's real step is the median
over the ranks] and [the replay: ``torchrun --nproc_per_node 2
-m param_compute.run_benchmark -c JOB.json --replay-step --only 'c10d::*'`` (the collectives
measured alone, then the step; compute configs left out to save time) and ``param-compute
totals --json`` of both ranks' files: the job's in-step time, the median over the ranks].

Targets: every rank's original time covered >= 95% (the capture summary); the job's in-step
replay within ±``--step-tolerance`` (10%) of the real step (medians over repetitions); per
collective whose original time is over 2% of the step, its in-step time within
±``--op-tolerance`` (25%) of the original (from its issue to its backend span's end in the
trace), per rank, printed with the 95% bootstrap interval of that ratio over the
repetitions. Exit status 1 on a miss; ``--out`` keeps every trace, spec and results file.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _processes import use_malloc  # noqa: E402

MODELS = ("ddp", "fsdp", "mpemb")
#: Steps each recording's Kineto trace holds (each call's original time: the median over
#: them). A collective overlapping compute on this 2-core machine takes one of two times from
#: step to step (mpemb's all-reduce: 1-3 ms where gloo's threads find a core, 5-12 ms where
#: compute holds both), so a median of a few steps lands in either; 40 settle it.
KINETO_STEPS = 40
#: The replay's measuring time (--max-time): as many steps again as a recording's, or more.
REPLAY_MAX_TIME_S = 3.0


# -- the models (built in each rank) ----------------------------------------------------------
def build(name: str, quick: bool):
    """(step function, its module) for one rank: the process group is made already."""
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    import torch.nn.functional as F

    torch.manual_seed(0)
    rank, world = dist.get_rank(), dist.get_world_size()
    width, batch = (256, 64) if quick else (1024, 256)
    if name in ("ddp", "fsdp"):
        layers = []
        for _ in range(4):
            layers += [nn.Linear(width, width), nn.ReLU()]
        model = nn.Sequential(*layers)
        if name == "ddp":
            model = nn.parallel.DistributedDataParallel(model)
        else:
            from torch.distributed.fsdp import fully_shard

            for layer in model:
                if isinstance(layer, nn.Linear):
                    fully_shard(layer)
            fully_shard(model)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        x = torch.randn(batch, width)
        y = torch.randn(batch, width)

        def step():
            optimizer.zero_grad()
            F.mse_loss(model(x), y).backward()
            optimizer.step()
        return step
    # mpemb: 8 tables, half on each rank; pooled rows exchanged with all_to_all_single
    from torch.distributed.nn.functional import all_to_all_single

    tables, rows, dim, bag = 8, 20000 if quick else 50000, 64, 20
    batch = 128 if quick else 512
    mine = tables // world
    embeddings = nn.ModuleList(nn.EmbeddingBag(rows, dim, mode="sum") for _ in range(mine))
    top = nn.parallel.DistributedDataParallel(nn.Sequential(
        nn.Linear(tables * dim, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(),
        nn.Linear(256, 1)))
    optimizer = torch.optim.SGD(list(embeddings.parameters()) + list(top.parameters()),
                                lr=0.01)
    generator = torch.Generator().manual_seed(rank)
    indices = [torch.randint(0, rows, (batch * bag,), generator=generator) for _ in range(mine)]
    offsets = torch.arange(0, batch * bag, bag)
    labels = torch.rand(batch // world, 1)

    def step():
        optimizer.zero_grad()
        pooled = torch.stack([emb(idx, offsets) for emb, idx in zip(embeddings, indices)], 1)
        # [batch, mine, dim] -> each rank's half of the batch, from every rank's tables
        send = pooled.reshape(world, batch // world, mine, dim).contiguous().view(-1)
        received = all_to_all_single(torch.empty_like(send), send)
        features = received.view(world, batch // world, mine, dim).permute(1, 0, 2, 3) \
            .reshape(batch // world, tables * dim)
        loss = F.binary_cross_entropy_with_logits(top(features), labels)
        loss.backward()
        optimizer.step()
    return step


# -- the ranks' work ----------------------------------------------------------------------------
def rank_record(model: str, out: Path, quick: bool, steps: int = KINETO_STEPS) -> None:
    """This rank's traces: Kineto over ``KINETO_STEPS`` steps (the times: no execution-trace
    observer, whose cost per call is large), then one step under the observer alone (the
    calls and their dataflow); the capture joins them by name, each call to its occurrences
    in every profiled step. Warm steps first; a barrier before each step."""
    import torch.distributed as dist
    from torch.profiler import ExecutionTraceObserver, ProfilerActivity, profile

    step = build(model, quick)
    rank = dist.get_rank()
    for _ in range(3):
        dist.barrier()
        step()
    et_path, kineto_path = out / f"et{rank}.json", out / f"kineto{rank}.json"
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            dist.barrier()
            step()
    prof.export_chrome_trace(str(kineto_path))
    observer = ExecutionTraceObserver()
    observer.register_callback(str(et_path))
    dist.barrier()
    observer.start()
    step()
    observer.stop()
    observer.unregister_callback()


def rank_real(model: str, out: Path, steps: int, quick: bool) -> None:
    """This rank's real step, unprofiled: the median of ``steps``, a barrier before each."""
    import torch.distributed as dist

    step = build(model, quick)
    for _ in range(3):
        dist.barrier()
        step()
    times = []
    for _ in range(steps):
        dist.barrier()
        start = time.perf_counter()
        step()
        times.append((time.perf_counter() - start) * 1e3)
    (out / f"real{dist.get_rank()}.json").write_text(json.dumps(
        {"median_ms": statistics.median(times), "times_ms": times}))


def worker(args) -> int:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    try:
        if args.phase == "record":
            rank_record(args.model, Path(args.dir), args.quick, args.recorded_steps)
        else:
            rank_real(args.model, Path(args.dir), args.real_steps, args.quick)
    finally:
        dist.destroy_process_group()
    return 0


# -- the driver ---------------------------------------------------------------------------------
def _env() -> Dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1",
            "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}


def _run(command: List[str], what: str) -> subprocess.CompletedProcess:
    done = subprocess.run(command, env=_env(), capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{what} failed ({done.returncode}):\n{done.stderr[-4000:]}")
    return done


def torchrun(*argv: str) -> List[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
            "2", *argv]


def ranks_phase(model: str, phase: str, folder: Path, args) -> None:
    command = torchrun(str(Path(__file__).resolve()), "--worker", "--model", model,
                       "--phase", phase, "--dir", str(folder), "--real-steps",
                       str(args.real_steps), "--recorded-steps", str(args.recorded_steps),
                       *(["--quick"] if args.quick else []))
    try:
        _run(command, f"{model} {phase}")
    except RuntimeError as failed:  # a rank's teardown can abort (gloo's threads): once more
        print(f"{failed}\n(again)", file=sys.stderr)
        _run(command, f"{model} {phase}")


def capture(model: str, folder: Path) -> Dict[str, Any]:
    spec = folder / "job.json"
    done = _run([sys.executable, "-m", "param_compute.capture",
                 "--from-et", str(folder / "et0.json"), "--kineto", str(folder / "kineto0.json"),
                 "--from-et", str(folder / "et1.json"), "--kineto", str(folder / "kineto1.json"),
                 "-o", str(spec), "--target-device", "cpu"], f"{model} capture")
    covered = [float(m) for m in re.findall(r"original time covered: cpu ([0-9.]+)%",
                                            done.stdout)]
    report = json.loads((folder / "job.capture.json").read_text())
    comm = [r["communication"] for r in report["ranks"]]
    return {"spec": spec, "covered": covered, "communication": comm, "summary": done.stdout}


def replay(model: str, spec: Path, folder: Path, index: int,
           max_time: float = REPLAY_MAX_TIME_S) -> Dict[str, Any]:
    out = folder / f"replay{index}.json"
    _run(torchrun("-m", "param_compute.run_benchmark", "-c", str(spec), "--replay-step",
                  "--only", "c10d::*", "--max-time", str(max_time), "--output",
                  str(out), "-q", "--no-progress"),
         f"{model} replay")
    files = [str(folder / f"replay{index}.rank{r}of2.json") for r in (0, 1)]
    done = _run([sys.executable, "-m", "param_compute.workload_totals", "--json", *files],
                f"{model} totals")
    return json.loads(done.stdout)


def recorded_comm(folder: Path) -> Dict[Any, float]:
    """(op, rank) -> the recording's communication time (ms) of that collective op: the sum of
    its calls' ``comm_us`` (issue to their backend span's end) in the captured step file."""
    data = json.loads((folder / "job.step.json").read_text())
    out: Dict[Any, float] = {}
    for body in data["ranks"]:
        for call in body["calls"]:
            if call.get("comm_us") is not None:
                key = (call["run"].split("|")[0], body["rank"])
                out[key] = out.get(key, 0.0) + call["comm_us"] / 1e3
    return out


def ratio_interval(replayed: List[float], recorded: List[float], draws: int = 2000,
                   seed: int = 0) -> Any:
    """The 95% bootstrap interval of median(replayed) / median(recorded), each side's
    repetitions resampled with replacement: how far the ratio moves with the repetitions
    drawn (a collective beside compute varies from process to process more than from step
    to step). None with fewer than 3 repetitions a side."""
    import random

    if len(replayed) < 3 or len(recorded) < 3:
        return None
    rng = random.Random(seed)
    ratios = []
    for _ in range(draws):
        top = statistics.median(rng.choices(replayed, k=len(replayed)))
        bottom = statistics.median(rng.choices(recorded, k=len(recorded)))
        if bottom > 0:
            ratios.append(top / bottom)
    if not ratios:
        return None
    ratios.sort()
    return [ratios[int(0.025 * (len(ratios) - 1))], ratios[int(0.975 * (len(ratios) - 1))]]


def evaluate(model: str, args, root: Path) -> Dict[str, Any]:
    folder = root / model
    folder.mkdir(parents=True, exist_ok=True)
    ranks_phase(model, "record", folder, args)
    captured = capture(model, folder)
    reals, replays, recorded = [], [], [recorded_comm(folder)]
    for index in range(args.reps):
        if index:  # the original's collectives recorded again, interleaved with the rest
            again = folder / f"record_{index}"
            again.mkdir(exist_ok=True)
            ranks_phase(model, "record", again, args)
            capture(model, again)
            recorded.append(recorded_comm(again))
        real = folder / f"real_{index}"
        real.mkdir(exist_ok=True)
        ranks_phase(model, "real", real, args)
        per_rank = [json.loads((real / f"real{r}.json").read_text())["median_ms"]
                    for r in (0, 1)]
        reals.append(statistics.median(per_rank))
        replays.append(replay(model, captured["spec"], folder, index, args.replay_time))
    in_step = [job["in_step_ms"] for job in replays]
    real_ms, step_ms = statistics.median(reals), statistics.median(in_step)
    collectives = []
    for entry in replays[-1]["collectives"]:
        for rank_row in entry["ranks"]:
            rows = [next(r for r in job["collectives"] if r["op"] == entry["op"])["ranks"]
                    for job in replays]
            in_steps = [next(r for r in row if r["rank"] == rank_row["rank"])["in_step_ms"]
                        for row in rows]
            originals = [r[(entry["op"], rank_row["rank"])] for r in recorded
                         if (entry["op"], rank_row["rank"]) in r]
            original = statistics.median(originals) if originals else rank_row["original_ms"]
            replayed = [v for v in in_steps if v is not None]
            collectives.append({"op": entry["op"], "rank": rank_row["rank"],
                                "original_ms": original, "originals": originals,
                                "in_steps": replayed,
                                "ratio_interval": ratio_interval(replayed, originals),
                                "replayed_spec_ms": rank_row["original_ms"],
                                "in_step_ms": statistics.median(
                                    [v for v in in_steps if v is not None] or [0.0]),
                                "share": (original or 0) / real_ms if real_ms else 0})
    return {"model": model, "covered": captured["covered"], "real_ms": real_ms,
            "reals": reals, "in_step_ms": step_ms, "in_steps": in_step,
            "ratio": step_ms / real_ms, "ratios": [s / r for s, r in zip(in_step, reals)],
            "collectives": collectives, "communication": captured["communication"],
            "ledgers": [{"rank": ledger["rank"], "compute": ledger["compute"],
                         "communication": ledger["communication"]}
                        for ledger in replays[-1]["ranks"]]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--reps", type=int, default=11,
                        help="interleaved repetitions (default 11: a collective beside compute "
                             "varies more from process to process than from step to step; "
                             "mpemb's all-reduce read 1.32 of its original with 5 and 0.97-1.22 "
                             "with 11)")
    parser.add_argument("--real-steps", type=int, default=30)
    parser.add_argument("--recorded-steps", type=int, default=KINETO_STEPS,
                        help=f"steps each recording's Kineto trace holds (default {KINETO_STEPS})")
    parser.add_argument("--replay-time", type=float, default=REPLAY_MAX_TIME_S,
                        help=f"the replay's --max-time, s (default {REPLAY_MAX_TIME_S})")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--quick", action="store_true", help="small sizes (a check, no figure)")
    parser.add_argument("--step-tolerance", type=float, default=0.10)
    parser.add_argument("--op-tolerance", type=float, default=0.25)
    parser.add_argument("--malloc", choices=("default", "recycle", "fresh"), default="fresh",
                        help="glibc's allocator in every process (real steps, recordings, "
                             "replays). recycle: freed memory kept for reuse, as jemalloc or "
                             "tcmalloc would (bench/replay_models.py's --malloc); fresh: every "
                             "block of 1 MiB or more mapped fresh and returned when freed. Under "
                             "glibc's defaults mpemb's dense embedding-bag gradients (12.8 MB a "
                             "table) take fresh pages in some processes and not in others, and "
                             "under recycle a profiled step takes them where the unprofiled one "
                             "does not (likely the profiler's allocations splitting free blocks), so "
                             "the recordings' collectives wait on compute the real step does not "
                             "do; fresh, the default, makes every process alike")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    parser.add_argument("--phase", help=argparse.SUPPRESS)
    parser.add_argument("--dir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args)
    allocator = use_malloc(args.malloc)  # inherited by every child process
    root = args.out or Path(tempfile.mkdtemp(prefix="dist_steps_"))
    results = []
    started = time.monotonic()
    for model in args.models.split(","):
        results.append(evaluate(model, args, root))
    missed = 0
    print(f"distributed steps, 2 gloo ranks x 1 thread, allocator {allocator}, "
          f"{args.reps} reps interleaved "
          f"({time.monotonic() - started:.0f} s; files in {root})")
    print(f"{'model':<7} {'covered r0/r1':>14} {'real ms':>9} {'in-step ms':>10} "
          f"{'in-step/real (reps)':<30} collectives >2% within ±{args.op_tolerance:.0%}")
    for result in results:
        big = [c for c in result["collectives"] if c["share"] > 0.02]
        ok = [c for c in big if c["original_ms"] and abs(
            c["in_step_ms"] / c["original_ms"] - 1) <= args.op_tolerance]
        covered_ok = all(c >= 95 for c in result["covered"])
        step_ok = abs(result["ratio"] - 1) <= args.step_tolerance
        missed += (not covered_ok) + (not step_ok) + (len(ok) < len(big))
        reps = ", ".join(f"{r:.2f}" for r in result["ratios"])
        print(f"{result['model']:<7} {'/'.join(f'{c:.1f}%' for c in result['covered']):>14} "
              f"{result['real_ms']:>9.2f} {result['in_step_ms']:>10.2f} "
              f"{result['ratio']:.2f}{'' if step_ok else '!'} ({reps}){'':<8} "
              f"{len(ok)} of {len(big)}")
        for c in result["collectives"]:
            spread = "/".join(f"{v:.1f}" for v in c["originals"])
            ratio = c["in_step_ms"] / c["original_ms"] if c["original_ms"] else 0.0
            interval = c["ratio_interval"]
            within = f" [{interval[0]:.2f}, {interval[1]:.2f}]" if interval else ""
            print(f"    rank {c['rank']} {c['op']:<28} original {c['original_ms'] or 0:8.3f} ms "
                  f"in-step {c['in_step_ms']:8.3f} ms, {ratio:.2f}{within} "
                  f"({100 * c['share']:.1f}% of the step; recordings {spread} ms; replays "
                  f"{'/'.join(f'{v:.1f}' for v in c['in_steps'])} ms)")
        for ledger in result["ledgers"]:
            comm = ledger["communication"] or {}
            compute = ledger["compute"] or {}
            print(f"    rank {ledger['rank']} compute {compute.get('original_ms') or 0:.2f} / "
                  f"{compute.get('in_step_ms') or 0:.2f} ms, communication "
                  f"{comm.get('original_ms') or 0:.2f} / {comm.get('in_step_ms') or 0:.2f} ms, "
                  f"not hidden {comm.get('original_exposed_ms') or 0:.2f} / "
                  f"{comm.get('in_step_exposed_ms') or 0:.2f} ms (original / in-step)")
    (root / "dist_steps.json").write_text(json.dumps(results, indent=1, default=str))
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
