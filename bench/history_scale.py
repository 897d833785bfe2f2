#!/usr/bin/env python
"""Results history at scale: 1,000 labels × 1,000 configs ingested, checked, memory flat.

Targets (issue 25): ingesting 1,000 results files of 1,000 configs each (one per label, the
nightly runs of about three years) takes under a minute in all; ``history check`` answers in
seconds (``CHECK_LIMIT_S``); memory is flat in history size: the peak RSS of an ``add`` and of
a ``check`` at 1,000 labels is within ``FLAT_RATIO`` of the same command at 100 labels.

Each results file is generated just before it is added (and removed after): a header, 1,000
records (10 ops × 100 configs; 10 measured times, stats with the median's interval) whose
medians wander 2% from run to run, and two planted changes: ``torch.op0|7`` 20% slower from
label L0600 and ``torch.op5|50`` 15% faster from L0300. ``check --fail-on-regression 10``
must name exactly the first, at L0600 (and nothing at 100 labels). Beside every add, the same
file is read once by ``results.file.ResultsStream`` alone: the reference, the floor any
ingest pays to read its input. Each add waits for a core free of other load
(``_processes.wait_quiet``, torch-free; the waiting not timed) and the table gives CPU time
beside wall time. Adds run in this process (the time of ``history.ingest``); the
measured commands at 100 and 1,000 labels run as fresh ``python -m param_compute.history``
children (peak RSS from ``os.wait4``).

    python bench/history_scale.py                         # 1,000 × 1,000 (a few minutes)
    python bench/history_scale.py --labels 200 --configs 200

Exit status: 0 every target met, 1 a target missed, 2 a wrong answer.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import List

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from param_compute.history.ingest import add_results  # noqa: E402
from param_compute.history.store import open_store  # noqa: E402
from param_compute.results.file import ResultsStream  # noqa: E402
from _processes import wait_quiet  # noqa: E402

INGEST_LIMIT_S = 60.0
CHECK_LIMIT_S = 10.0
FLAT_RATIO = 1.25
SAMPLES = 10


def _write(path: Path, label_index: int, configs: int, rng: random.Random) -> None:
    lines = [json.dumps({"run_options": {"device": "cpu", "num_threads": 1,
                                         "config_file": "scale.json"},
                         "sys_info": {"hostname": "bench-host", "device": "cpu",
                                      "machine": "x86_64", "pytorch_version": "2.13.0",
                                      "pytorch_num_threads": 1},
                         "start_time": f"label-{label_index}"})]
    for i in range(configs):
        op, config = f"torch.op{i % 10}", i // 10
        base = 0.01 * (1 + config / 10)
        if op == "torch.op0" and config == 7 and label_index >= 600:
            base *= 1.2
        if op == "torch.op5" and config == 50 and label_index >= 300:
            base *= 0.85
        median = base * rng.gauss(1.0, 0.02)
        times = sorted(median * (1 + 0.01 * (k - SAMPLES / 2) / SAMPLES) for k in range(SAMPLES))
        lines.append(json.dumps({
            "op_name": op, "id": f"{config}|0|0", "status": "ok",
            "metric": {"forward": {"measure.time": times}},
            "stats": {"forward": {"n": SAMPLES, "mean": median, "median": median,
                                  "min": times[0], "max": times[-1], "ci_low": times[1],
                                  "ci_high": times[-2]}},
            "config": {"build": None, "input": {"args": [
                {"type": "tensor", "dtype": "float", "shape": [64 + config, 64]}]}}}))
    lines.append(json.dumps({"finish_time": f"end-{label_index}"}))
    path.write_text("\n".join(lines) + "\n")


def _measured(args: List[str]):
    """(wall s, CPU s, peak RSS MB, output, exit status) of ``python -m
    param_compute.history ARGS`` (``os.wait4`` reaps it: that child's own usage)."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    start = time.perf_counter()
    process = subprocess.Popen([sys.executable, "-m", "param_compute.history", *args],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    output = process.stdout.read().decode()
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    return (time.perf_counter() - start, usage.ru_utime + usage.ru_stime,
            usage.ru_maxrss / 1024, output, process.returncode)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--labels", type=int, default=1000)
    parser.add_argument("--configs", type=int, default=1000)
    args = parser.parse_args()
    if args.labels < 700 or args.configs < 510:
        print("note: fewer than 700 labels or 510 configs: the planted changes are partly "
              "outside the history", file=sys.stderr)
    rng = random.Random(25)
    work = Path(tempfile.mkdtemp(prefix="history-scale-"))
    db = work / "history.db"
    ingest_s = ingest_cpu = read_s = 0.0
    rows = []
    problems = []
    crowded = 0
    with open_store(str(db), create=True) as store:
        for index in range(1, args.labels + 1):
            path = work / f"r{index}.json"
            _write(path, index, args.configs, rng)
            label = f"L{index:04d}"
            crowded += not wait_quiet()
            if index in (100, args.labels):  # the measured adds: fresh processes
                wall, cpu, rss, output, code = _measured(["add", str(path), "--label", label,
                                                          "--db", str(db)])
                if code != 0:
                    problems.append(f"add {label}: exit {code}: {output[-300:]}")
                ingest_s += wall
                ingest_cpu += cpu
                rows.append((f"add at {index} labels", wall, cpu, rss))
            else:
                start, cpu_start = time.perf_counter(), time.process_time()
                add_results(store, path, label)
                ingest_s += time.perf_counter() - start
                ingest_cpu += time.process_time() - cpu_start
            start = time.perf_counter()
            for _ in ResultsStream(path):
                pass
            read_s += time.perf_counter() - start
            path.unlink()
            if index in (100, args.labels):
                wall, cpu, rss, output, code = _measured(
                    ["check", "--fail-on-regression", "10", "--db", str(db)])
                rows.append((f"check at {index} labels", wall, cpu, rss))
                regressions = [line for line in output.splitlines()
                               if line.startswith("regression:")]
                expected = 0 if index < 600 else 1
                if len(regressions) != expected or (expected and not regressions[0].startswith(
                        "regression: torch.op0|7|0|0 ") or expected
                        and " at L0600 " not in regressions[0]):
                    problems.append(f"check at {index} labels: {regressions or output[-300:]}")
                if code != (1 if expected else 0):
                    problems.append(f"check at {index} labels: exit {code}")
        counts = store.counts()
    size_mb = sum(f.stat().st_size for f in work.glob("history.db*")) / 2**20
    print(f"{args.labels} labels × {args.configs} configs: {counts['points']:,} points in "
          f"{counts['series']:,} series, database {size_mb:.0f} MB")
    print()
    print("| step | wall s | CPU s | peak RSS MB |")
    print("| --- | ---: | ---: | ---: |")
    print(f"| ingest, all {args.labels} files | {ingest_s:.1f} | {ingest_cpu:.1f} | - |")
    print(f"| reference: ResultsStream read alone | {read_s:.1f} | - | - |")
    for name, wall, cpu, rss in rows:
        print(f"| {name} | {wall:.2f} | {cpu:.2f} | {rss:.0f} |")
    verdicts = [("ingest under a minute", ingest_s < INGEST_LIMIT_S)]
    checks = [r for r in rows if r[0].startswith("check")]
    adds = [r for r in rows if r[0].startswith("add")]
    verdicts.append(("check in seconds", all(r[1] < CHECK_LIMIT_S for r in checks)))
    if len(checks) == 2:
        verdicts.append(("check memory flat", checks[1][3] <= FLAT_RATIO * checks[0][3]))
        verdicts.append(("add memory flat", adds[1][3] <= FLAT_RATIO * adds[0][3]))
    print()
    print(f"{args.labels - crowded} of {args.labels} adds started with a core free of other "
          "load")
    for name, ok in verdicts:
        print(f"{name}: {'pass' if ok else 'MISS'}")
    for problem in problems:
        print(f"WRONG: {problem}")
    for leftover in work.iterdir():
        leftover.unlink()
    work.rmdir()
    if problems:
        return 2
    return 0 if all(ok for _, ok in verdicts) else 1


if __name__ == "__main__":
    sys.exit(main())
