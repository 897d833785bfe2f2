"""Does ``--max-noise 1`` pin a steady op's median as well as torch.utils.benchmark, sooner?

For each steady op (one thread, float32 inputs made once per case and shared by both tools):

* ours: ``param_compute.run(..., warmup=10, iteration=1, max_noise=1)`` in-process (discrete
  mode, the canary on): the relative half-width of the median's 95% interval (the larger side,
  from ``stats``), the stop reason, and the time the whole call took (building the operator,
  making data, counting FLOPs and the canary included) beside the time spent measuring;
* theirs: ``Timer(...).blocked_autorange(min_run_time=1)``: the same interval computed from its
  block times (``results.stats.median_ci``), and the time the call took.

Targets: ours within ±1% and its whole call at most ``TIME_RATIO`` (0.5) of theirs. The table
shows both widths and times side by side; exit status 0 when every case meets both, else 1.

    python bench/max_noise.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import torch.utils.benchmark as benchmark  # noqa: E402

import param_compute  # noqa: E402
from param_compute.measure.measurer import relative_half_width  # noqa: E402

TIME_RATIO = 0.5
MAX_NOISE = 1.0
CASES = (("torch.add", [256, 256], 2, "torch.add(a, b)"),
         ("torch.mm", [256, 256], 2, "torch.mm(a, b)"),
         ("torch.sum", [1024, 1024], 1, "torch.sum(a)"))


def spec(op: str, shape, arity: int) -> dict:
    tensor = {"type": "tensor", "dtype": "float", "shape": shape}
    return {op: {"input_data_generator": "PyTorch:DefaultDataGenerator",
                 "config": [{"input": [{"args": [tensor] * arity}]}]}}


def ours(op: str, shape, arity: int):
    start = time.perf_counter()
    [record] = param_compute.run(spec(op, shape, arity), warmup=10, iteration=1,
                                 max_noise=MAX_NOISE, num_threads=1, console=False).records
    took = time.perf_counter() - start
    stats = record["stats"]["forward"]
    half = max(stats["median"] - stats["ci_low"], stats["ci_high"] - stats["median"]) \
        / stats["median"]
    measuring = stats["n"] * stats["mean"] / 1e3
    return half, took, measuring, stats["stop_reason"], stats["n"]


def theirs(shape, arity: int, statement: str):
    torch.set_num_threads(1)
    a, b = torch.rand(shape), torch.rand(shape)
    timer = benchmark.Timer(statement, globals={"a": a, "b": b, "torch": torch},
                            num_threads=1)
    start = time.perf_counter()
    measurement = timer.blocked_autorange(min_run_time=1)
    took = time.perf_counter() - start
    return relative_half_width(list(measurement.times)), took, len(measurement.times)


def main() -> int:
    rows, ok = [], True
    for op, shape, arity, statement in CASES:
        ours(op, shape, arity)  # first call of the op in this process: lazy set-up paid
        half, took, measuring, reason, n = ours(op, shape, arity)
        their_half, their_took, blocks = theirs(shape, arity, statement)
        passed = half <= MAX_NOISE / 100 and took <= TIME_RATIO * their_took
        ok &= passed
        rows.append((f"{op} {'x'.join(map(str, shape))}", half, their_half, took, measuring,
                     their_took, took / their_took, reason, n, blocks,
                     "pass" if passed else "MISS"))
    print(f"--max-noise {MAX_NOISE:g} against blocked_autorange(min_run_time=1), one thread")
    print("case | ours ±CI | theirs ±CI | ours s (call) | ours s (measuring) | theirs s | "
          "time ratio | stop | ours n | their blocks | verdict")
    for case, half, their_half, took, measuring, their_took, ratio, reason, n, blocks, verdict \
            in rows:
        print(f"{case} | ±{half:.2%} | ±{their_half:.2%} | {took:.3f} | {measuring:.3f} | "
              f"{their_took:.3f} | {ratio:.2f} | {reason} | {n} | {blocks} | {verdict}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
