"""GPU check of the measurement side: run on a CUDA machine, prints tables, exits 1 on a miss.

    python bench/gpu_check.py [--out DIR]

1. The example specs with ``-d cuda`` in all three exec modes (and backward): every run
   measured, CUDA event times and peak-memory metrics present.
2. Our discrete (L2 flushed) and continuous medians against ``torch.utils.benchmark`` and
   ``triton.testing.do_bench`` on ops from ~10 µs to ~1 ms: the continuous (warm) median must
   be within 15% of ``torch.utils.benchmark``'s (also warm, back to back) for kernels over 50 µs,
   and the discrete (L2 flushed) median within 15% of do_bench's (also flushed) over 20 µs.
3. ``--cuda-graph`` and ``--cuda-l2-cache on`` runs; the L2 flush buffer size.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples" / "configs"


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "param_compute.run_benchmark", "--no-progress",
                           *args], capture_output=True, text=True, cwd=REPO)


def records(path: Path):
    return [json.loads(line) for line in path.read_text().splitlines()][1:-1]


def check_examples(out: Path) -> bool:
    if "--skip-examples" in sys.argv:
        return True
    ok = True
    print("\n1. example specs on cuda")
    print(f"{'spec':<22} {'mode':<18} {'runs':>5} {'ok':>4} {'gpu mem':>8}  result")
    for spec in sorted(EXAMPLES.glob("*.json")):
        for mode in ("discrete", "continuous", "continuous_events"):
            result_path = out / f"{spec.stem}_{mode}.json"
            done = cli("-c", str(spec), "-d", "cuda", "--exec-mode", mode, "-w", "5", "-i", "20",
                       "-b", "--output", str(result_path))
            runs = records(result_path) if result_path.exists() else []
            measured = [r for r in runs if r.get("status") == "ok"]
            memory = all("measure.gpu.memory" in r["metric"]["forward"] for r in measured)
            passed = done.returncode == 0 and runs and len(measured) == len(runs) and memory
            ok &= bool(passed)
            print(f"{spec.stem:<22} {mode:<18} {len(runs):>5} {len(measured):>4} "
                  f"{str(memory):>8}  {'pass' if passed else 'MISS'}")
            if not passed:
                print(done.stderr[-2000:])
    return ok


CASES = [
    ("torch.add", [("tensor", [1 << 20], "float")], {}),
    ("torch.add", [("tensor", [1 << 26], "float")], {}),
    ("torch.mm", [("tensor", [2048, 2048], "bfloat16"), ("tensor", [2048, 2048], "bfloat16")], {}),
    ("torch.mm", [("tensor", [8192, 8192], "bfloat16"), ("tensor", [8192, 8192], "bfloat16")], {}),
    ("torch.softmax", [("tensor", [8192, 8192], "float")], {"dim": -1}),
    ("torch.nn.functional.layer_norm", [("tensor", [8192, 4096], "float")], {"normalized_shape": [4096]}),
]


def _spec(op, args, kwargs):
    def data(kind, shape, dtype):
        return {"type": kind, "shape": shape, "dtype": dtype, "requires_grad": False}

    spec_args = [data(*a) for a in args]
    if op == "torch.add":
        spec_args = spec_args * 2
    spec_kwargs = {}
    for key, value in kwargs.items():
        spec_kwargs[key] = ({"type": "int", "value": value} if isinstance(value, int) else
                            {"type": "genericlist", "value": [{"type": "int", "value": v}
                                                              for v in value]})
    return {op: {"input_data_generator": "PyTorch:DefaultDataGenerator",
                 "config": [{"input": [{"args": spec_args, "kwargs": spec_kwargs}]}]}}


def _materialize(op, args, kwargs):
    if op == "torch.add":
        args = args * 2  # two distinct tensors, as the spec generates
    tensors = [torch.rand(shape, device="cuda").to(getattr(torch, {"float": "float32"}.get(
        dtype, dtype))) for _, shape, dtype in args]
    function = {"torch.add": torch.add, "torch.mm": torch.mm, "torch.softmax": torch.softmax,
                "torch.nn.functional.layer_norm": torch.nn.functional.layer_norm}[op]
    return lambda: function(*tensors, **kwargs)


def compare_timers(out: Path) -> bool:
    import torch.utils.benchmark as tub
    try:
        from triton.testing import do_bench
    except ImportError:
        do_bench = None
    print("\n2. ours against torch.utils.benchmark and triton.testing.do_bench (medians, µs)")
    print(f"{'op':<32} {'shape':<22} {'ours disc':>10} {'ours cont':>10} {'tub':>10} "
          f"{'do_bench':>10} {'cont/tub':>9} {'disc/db':>9}  result")
    ok = True
    for index, (op, args, kwargs) in enumerate(CASES):
        spec_path = out / f"case{index}.json"
        spec_path.write_text(json.dumps(_spec(op, args, kwargs)))
        ours = {}
        for mode in ("discrete", "continuous"):
            path = out / f"case{index}_{mode}.json"
            done = cli("-c", str(spec_path), "-d", "cuda", "--exec-mode", mode, "-w", "20",
                       "-i", "200" if mode == "discrete" else "50", "--min-time", "0.2",
                       "--output", str(path))
            if done.returncode != 0:
                print(done.stderr[-2000:])
                return False
            [record] = records(path)
            ours[mode] = record["stats"]["forward"]["median"] * 1e3
        fn = _materialize(op, args, kwargs)
        fn()
        torch.cuda.synchronize()
        measurement = tub.Timer(stmt="fn()", globals={"fn": fn}).blocked_autorange(min_run_time=1)
        tub_us = measurement.median * 1e6
        triton_us = do_bench(fn, return_mode="median") * 1e3 if do_bench else float("nan")
        ratio = ours["continuous"] / tub_us
        cold = ours["discrete"] / triton_us
        passed = (tub_us < 50 or abs(ratio - 1) <= 0.15) and (
            not do_bench or triton_us < 20 or abs(cold - 1) <= 0.15)
        ok &= passed
        shape = "x".join(str(d) for d in args[0][1])
        print(f"{op:<32} {shape:<22} {ours['discrete']:>10.1f} {ours['continuous']:>10.1f} "
              f"{tub_us:>10.1f} {triton_us:>10.1f} {ratio:>9.3f} {cold:>9.3f}  "
              f"{'pass' if passed else 'MISS'}")
    return ok


def check_modes(out: Path) -> bool:
    print("\n3. cuda graph, warm L2, flush buffer")
    spec = EXAMPLES / "simple_add.json"
    results = {}
    for name, extra in (("flushed", []), ("warm L2", ["--cuda-l2-cache", "on"]),
                        ("cuda graph", ["--cuda-graph"])):
        path = out / f"modes_{name.replace(' ', '_')}.json"
        done = cli("-c", str(spec), "-d", "cuda", "-w", "10", "-i", "200", *extra,
                   "--output", str(path))
        if done.returncode != 0:
            print(f"{name}: {done.stderr[-2000:]}")
            return False
        [record] = records(path)
        results[name] = (done.returncode, record["stats"]["forward"]["median"] * 1e3,
                         record["metric"]["forward"].get("capture.time"))
        print(f"{name:<12} rc={done.returncode} median {results[name][1]:.2f} µs "
              f"capture {results[name][2]}")
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    print(f"L2 flush buffer: {l2 / 2**20:.1f} MiB ({torch.cuda.get_device_name(0)})")
    return all(rc == 0 for rc, _, _ in results.values())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--skip-examples", action="store_true", help="skip part 1")
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp())
    out.mkdir(parents=True, exist_ok=True)
    if not torch.cuda.is_available():
        print("no CUDA device")
        return 1
    print(f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}")
    ok = check_examples(out)
    ok &= compare_timers(out)
    ok &= check_modes(out)
    print("\nall checks pass" if ok else "\nMISS")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
