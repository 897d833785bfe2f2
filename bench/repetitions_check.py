#!/usr/bin/env python
"""``--only`` and ``--repetitions``: what the filter selects and what repetitions expose.

Targets (issue 23): ``--only torch.mm`` runs only ``torch.mm`` (every record of the results
file is one of its configs, all 8 of them); ``--repetitions 3`` records three repetition
medians per record, the record's median is their median and its interval spans them.

The table shows, per config, the three repetition medians, the combined median and the spread
between processes ((max - min) / median of the repetition medians): variance between processes
that one long run cannot show.

    python bench/repetitions_check.py [--repetitions 3] [--iterations 50]

Exit status: 0 the targets met, 1 a target missed, 2 the run failed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from param_compute.results.file import read_results  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--repetitions", type=int, default=3)
    p.add_argument("--iterations", type=int, default=50)
    args = p.parse_args()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p))
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "r.json"
        started = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "param_compute.run_benchmark", "-c",
             str(REPO / "examples" / "configs" / "matmul_sweep.json"), "--only", "torch.mm",
             "--repetitions", str(args.repetitions), "-w", "5", "-i", str(args.iterations),
             "--no-throughput", "--no-progress", "--output", str(out)],
            env=env, capture_output=True, text=True)
        seconds = time.perf_counter() - started
        if done.returncode != 0:
            print(done.stderr, file=sys.stderr)
            return 2
        records = read_results(out).records
    ok = [r["op_name"] for r in records] == ["torch.mm"] * 8
    print(f"--only torch.mm: {len(records)} records, operators {sorted({r['op_name'] for r in records})}"
          f" ({'ok' if ok else 'MISS'}); {args.repetitions} repetitions in {seconds:.0f} s")
    print(f"{'id':<9} {'repetition medians (µs)':<30} {'median':>8} {'interval':>17} "
          f"{'spread':>7}  result")
    for record in records:
        stats = record["stats"]["forward"]
        medians = stats.get("repetition_medians") or []
        good = (len(medians) == args.repetitions
                and abs(stats["median"] - statistics.median(medians)) < 1e-12
                and stats["ci_low"] <= min(medians) and stats["ci_high"] >= max(medians))
        ok &= good
        spread = (max(medians) - min(medians)) / stats["median"] if medians else float("nan")
        shown = ", ".join(f"{m * 1e3:.1f}" for m in medians)
        print(f"{record['id']:<9} {shown:<30} {stats['median'] * 1e3:>8.1f} "
              f"{stats['ci_low'] * 1e3:>8.1f}–{stats['ci_high'] * 1e3:<8.1f} {spread:>6.1%}  "
              f"{'ok' if good else 'MISS'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
