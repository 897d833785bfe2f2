#!/usr/bin/env python
"""GPU check of ``--timer kernel`` and the NVML clocks (issue 23): run on a CUDA machine.

    python bench/gpu_timer_check.py [--discard-throttled]

1. Clocks: the results header's ``sys_info.gpu_clocks`` (NVML: SM clock, maximum, application
   clocks, whether locked) and the per-sample ``measure.sm_clock``/``measure.throttled``.
2. Event time against kernel time for a few ops, from one-kernel ops where the two should agree
   (mm 4096² bf16, add 2^26 fp32) to launch-bound ones where the events also hold launch cost
   and gaps (add 64² fp32, a 3-op softmax on 256², layer_norm): the table shows the event and
   kernel medians, the launch overhead (event − kernel) and the kernels' share of the event time.

Targets (exit 1 on a miss): every op has kernel times; on the ops over 100 µs the kernel median
is within 10% of the event median (nothing launch-bound there); kernel time never exceeds the
event time by more than 5% (the profiler attributed a kernel it should not have); the header has
``gpu_clocks`` with a ``source`` (``null`` with the reason when nvidia-ml-py is missing).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from param_compute.results.file import read_results  # noqa: E402


def _tensor(shape, dtype="float"):
    return {"type": "tensor", "dtype": dtype, "shape": shape}


def _op(*args, **kwargs):
    entry = {"args": list(args)}
    if kwargs:
        entry["kwargs"] = kwargs
    return {"input_data_generator": "PyTorch:DefaultDataGenerator", "config": [{"input": [entry]}]}


SPEC = {
    "torch.mm": _op(_tensor([4096, 4096], "bfloat16"), _tensor([4096, 4096], "bfloat16")),
    "torch.add": {"input_data_generator": "PyTorch:DefaultDataGenerator", "config": [{"input": [
        {"args": [_tensor([1 << 26]), _tensor([1 << 26])]},
        {"args": [_tensor([64, 64]), _tensor([64, 64])]}]}]},
    "torch.nn.functional.softmax": _op(_tensor([256, 256]), {"type": "int", "value": -1}),
    "torch.nn.functional.layer_norm": _op(_tensor([256, 1024]),
                                          {"type": "genericlist", "value": [
                                              {"type": "int", "value": 1024}]}),
}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--discard-throttled", action="store_true")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        spec, out = Path(tmp) / "spec.json", Path(tmp) / "r.json"
        spec.write_text(json.dumps(SPEC))
        command = [sys.executable, "-m", "param_compute.run_benchmark", "-c", str(spec), "-d",
                   "cuda", "--timer", "kernel", "-w", "20", "-i", "100", "--no-progress",
                   "--no-throughput", "--output", str(out)]
        if args.discard_throttled:
            command.append("--discard-throttled")
        done = subprocess.run(command, capture_output=True, text=True, cwd=REPO)
        print(done.stderr[-2000:])
        if done.returncode != 0:
            return 2
        results = read_results(out)
    ok = True
    clocks = results.header.get("sys_info", {}).get("gpu_clocks")
    print(f"gpu_clocks: {clocks}")
    ok &= isinstance(clocks, dict) and "source" in clocks
    print(f"{'op':<32} {'id':<7} {'event µs':>9} {'kernel µs':>10} {'launch µs':>10} "
          f"{'kernel %':>8} {'throttled':>9} {'SM MHz':>11}  result")
    for record in results.records:
        forward = record["metric"]["forward"]
        event = statistics.median(forward["measure.time"]) * 1e3
        kernels = forward.get("measure.kernel_time") or []
        kernel = statistics.median(kernels) * 1e3 if kernels else float("nan")
        launch = statistics.median(forward.get("measure.launch_overhead") or [float("nan")]) * 1e3
        clocks_seen = forward.get("measure.sm_clock") or []
        span = f"{min(clocks_seen)}-{max(clocks_seen)}" if clocks_seen else "-"
        good = bool(kernels) and kernel <= event * 1.05 and (event < 100 or kernel >= 0.9 * event)
        ok &= good
        print(f"{record['op_name']:<32} {record['id']:<7} {event:>9.2f} {kernel:>10.2f} "
              f"{launch:>10.2f} {100 * kernel / event:>7.0f}% "
              f"{sum(forward.get('measure.throttled') or []):>9} {span:>11}  "
              f"{'ok' if good else 'MISS'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
