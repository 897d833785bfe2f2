"""An all-reduce sweep from a spec, side by side with the same collectives timed by hand.

    python bench/allreduce_sweep.py [--ranks 2] [--rounds 21] [--max-mib 64] [--max-time 0.5]

Starts ``--ranks`` gloo ranks (torchrun, one thread each) that each, in one run, time an
all-reduce of float32 messages from 1 KiB to ``--max-mib`` MiB (powers of two) both ways,
``--rounds`` times, each size both ways back to back (the order alternating by round):

* param_compute: a spec of ``torch.distributed.all_reduce`` at that size (the sweep's
  ``__list__`` of shapes, one at a time), run through the library (``param_compute.run``) as
  ``run_benchmark`` runs it under torchrun: the one Measurer with its default protocol (its
  ``--max-time`` given: 0.5 s here, where 0.1 s gave 64 MiB 5 samples), a barrier before each
  sample, each sample the slowest rank's (``measure.ranks``); its records' ``comms`` give
  algbw and busbw (nccl-tests' definitions);
* by hand, with ``torch.distributed`` alone, as do_bench goes: five samples estimate the
  time, the ranks agree on a count that fills the same window (at least ``--hand-samples``),
  then per sample a barrier and ``perf_counter`` around a synchronous ``all_reduce``; one
  all-reduce MAX afterwards gives each sample's slowest rank; the median.

At 2-8 MiB one round's median moves by ±20% from round to round on a shared 2-core machine,
on both sides alike: hence 21 rounds by default.

Rank 0 prints, per size, the median over rounds of both times, algbw and busbw of each, and
their ratio. Target: every size within ±``--tolerance`` (10%); exit status 1 on a miss.
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

REPO = Path(__file__).resolve().parent.parent


def sizes(max_mib: int):
    out, size = [], 1024
    while size <= max_mib * 2**20:
        out.append(size)
        size *= 2
    return out


def sweep_spec(byte_sizes):
    shapes = [[size // 4] for size in byte_sizes]
    return {"torch.distributed.all_reduce": {
        "input_iterator": "RangeConfigIterator",
        "input_data_generator": "PyTorch:DefaultDataGenerator",
        "config": [{"input": [{"args": [{"type": "tensor", "dtype": "float",
                                         "requires_grad": False, "shape": shapes,
                                         "__list__": ["shape"]}]}]}]}}


def by_hand(dist, torch, size: int, samples: int, window_s: float) -> float:
    """Median over samples of the slowest rank's time (ms) of a synchronous all-reduce, as
    do_bench goes: a few samples estimate the time, which gives the count (enough to fill
    ``window_s``, param_compute's --max-time, at least ``samples``; the ranks agree on it),
    then per sample a barrier and ``perf_counter`` around the call. Each rank keeps its
    samples; one all-reduce (MAX) after them gives each sample's slowest. (Agreeing after
    every sample put a second collective between each barrier and the next: whole rounds then
    took a scheduler's time slice, 3.3 ms against 0.2 ms.)"""
    tensor = torch.ones(size // 4)

    def sample() -> float:
        dist.barrier()
        start = time.perf_counter()
        dist.all_reduce(tensor)
        return time.perf_counter() - start

    estimate = torch.tensor([statistics.median(sample() for _ in range(5))],
                            dtype=torch.float64)
    dist.all_reduce(estimate, op=dist.ReduceOp.MAX)  # one count for every rank
    count = int(min(2000, max(samples, window_s / max(estimate.item(), 1e-6))))
    slowest = torch.tensor([sample() * 1e3 for _ in range(count)], dtype=torch.float64)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    return statistics.median(slowest.tolist())


def worker(args) -> int:
    import torch
    import torch.distributed as dist

    sys.path.insert(0, str(REPO))
    import param_compute

    torch.set_num_threads(1)
    if args.pin:  # this rank and every thread it starts (gloo's) on a CPU of its own
        cpus = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cpus[int(os.environ["LOCAL_RANK"]) % len(cpus)]})
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    byte_sizes = sizes(args.max_mib)
    ours = {size: [] for size in byte_sizes}
    hand = {size: [] for size in byte_sizes}
    rates = {size: [] for size in byte_sizes}
    for round_index in range(args.rounds):
        for size in byte_sizes:  # each size both ways back to back, the order alternating
            for side in (("ours", "hand") if round_index % 2 == 0 else ("hand", "ours")):
                if side == "hand":
                    hand[size].append(by_hand(dist, torch, size, args.hand_samples,
                                              args.max_time))
                    continue
                [record] = param_compute.run(sweep_spec([size]),
                                             max_time=args.max_time).records
                ours[size].append(record["stats"]["forward"]["median"])
                rates[size].append((record["comms"]["algbw_gbps"],
                                    record["comms"]["busbw_gbps"]))
    if rank == 0:
        rows = []
        for size in byte_sizes:
            mine, theirs = statistics.median(ours[size]), statistics.median(hand[size])
            algbw = size / (theirs / 1e3) / 1e9
            rows.append({"bytes": size, "ours_ms": mine, "hand_ms": theirs,
                         "ours_algbw": statistics.median(r[0] for r in rates[size]),
                         "ours_busbw": statistics.median(r[1] for r in rates[size]),
                         "hand_algbw": algbw, "hand_busbw": algbw * 2 * (world - 1) / world,
                         "ratio": mine / theirs, "ours_rounds": ours[size],
                         "hand_rounds": hand[size]})
        Path(args.json).write_text(json.dumps({"world": world, "rows": rows}))
    dist.destroy_process_group()
    return 0


def _size(value: int) -> str:
    return f"{value // 2**20} MiB" if value >= 2**20 else f"{value // 1024} KiB"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--max-mib", type=int, default=64)
    parser.add_argument("--hand-samples", type=int, default=31)
    parser.add_argument("--tolerance", type=float, default=0.10)
    parser.add_argument("--max-time", type=float, default=0.5,
                        help="param_compute's --max-time: its samples end once the median's "
                             "95%% interval is within ±2%% or after this long (the default "
                             "0.1 s gives 64 MiB 5 samples, against the hand's 31)")
    parser.add_argument("--pin", action="store_true",
                        help="each rank (and the threads it starts) on a CPU of its own")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--json", default=None,
                        help="keep the table's rows as JSON here (default: a temporary file)")
    args = parser.parse_args()
    if args.worker:
        return worker(args)
    scratch = None if args.json else tempfile.TemporaryDirectory(prefix="allreduce_sweep_")
    out = Path(args.json).resolve() if args.json else Path(scratch.name) / "rows.json"
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               "--nproc_per_node", str(args.ranks), str(Path(__file__).resolve()), "--worker",
               "--rounds", str(args.rounds), "--max-mib", str(args.max_mib), "--hand-samples",
               str(args.hand_samples), "--max-time", str(args.max_time), "--json", str(out),
               *(["--pin"] if args.pin else [])]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    started = time.monotonic()
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        print(done.stderr[-4000:], file=sys.stderr)
        return 1
    data = json.loads(out.read_text())
    print(f"all-reduce sweep, {data['world']} gloo ranks, 1 thread each, {args.rounds} rounds "
          f"interleaved ({time.monotonic() - started:.0f} s)")
    print(f"{'size':>8} {'ours ms':>9} {'hand ms':>9} {'ours/hand':>9} {'algbw ours':>10} "
          f"{'algbw hand':>10} {'busbw ours':>10} {'busbw hand':>10}")
    missed = 0
    for row in data["rows"]:
        ok = abs(row["ratio"] - 1) <= args.tolerance
        missed += not ok
        print(f"{_size(row['bytes']):>8} {row['ours_ms']:>9.4f} {row['hand_ms']:>9.4f} "
              f"{row['ratio']:>8.3f}{'' if ok else '!'} {row['ours_algbw']:>10.3f} "
              f"{row['hand_algbw']:>10.3f} {row['ours_busbw']:>10.3f} "
              f"{row['hand_busbw']:>10.3f}")
    print(f"{len(data['rows']) - missed} of {len(data['rows'])} sizes within "
          f"±{args.tolerance:.0%} (GB/s: 1e9 bytes a second)")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
