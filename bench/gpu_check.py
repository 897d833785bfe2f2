"""GPU check of the measurement side: run on a CUDA machine, prints tables, exits 1 on a miss.

    python bench/gpu_check.py [--out DIR]

1. The example specs with ``-d cuda`` in all three exec modes (and backward): every run
   measured, CUDA event times and peak-memory metrics present.
2. Our discrete (L2 flushed) and continuous medians against ``torch.utils.benchmark`` and
   ``triton.testing.do_bench`` on ops from ~10 µs to ~1 ms: the continuous (warm) median must
   be within 15% of ``torch.utils.benchmark``'s (also warm, back to back) for kernels over 50 µs,
   and the discrete (L2 flushed) median within 15% of do_bench's (also flushed) over 20 µs.
3. ``--cuda-graph`` and ``--cuda-l2-cache on`` runs; the L2 flush buffer size.
4. Issue 14 on CUDA: ``python -m param_compute.calibrate -d cuda`` (float32, bfloat16, float16)
   against the datasheet where the GPU is known; mm 8192² bf16 and add 2^28 fp32 with
   ``--warmup-time 0.2 --min-time 0.5`` in both modes: ``flops_util``/``bw_util`` in (0, 1.2],
   n >= 5 in continuous mode, a target; ``--verify`` with ``--pt2-model`` (add, mm, relu),
   ``--cuda-graph`` and ``=fp64`` (bf16 mm): PASS.
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
    return subprocess.run([sys.executable, "-m", "param_compute.cli.run_benchmark", "--no-progress",
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


#: Dense datasheet peaks (FLOP/s by dtype, bytes/s) of GPUs we know, for the calibrate table.
DATASHEET = {
    "H100": ({"bfloat16": 989e12, "float16": 989e12, "float32": 67e12}, 3.35e12),
    "H200": ({"bfloat16": 989e12, "float16": 989e12, "float32": 67e12}, 4.8e12),
}


def _datasheet(name: str):
    return next((v for k, v in DATASHEET.items() if k in name), (None, None))


def _tensor(shape, dtype):
    return {"type": "tensor", "shape": shape, "dtype": dtype, "requires_grad": False}


def _op(op, *args, target=None):
    entry = {"input": [{"args": list(args)}]}
    if target:
        entry["target"] = target
    return {op: {"input_data_generator": "PyTorch:DefaultDataGenerator", "config": [entry]}}


def check_measure(out: Path) -> bool:
    import os

    print("\n4. calibrate, utilization, targets, --verify (issue 14)")
    os.environ["PARAM_COMPUTE_CACHE_DIR"] = str(out / "cache")
    done = subprocess.run([sys.executable, "-m", "param_compute.calibrate", "-d", "cuda",
                           "--dtype", "float32", "--dtype", "bfloat16", "--dtype", "float16"],
                          capture_output=True, text=True, cwd=REPO)
    if done.returncode != 0:
        print(done.stdout, done.stderr[-2000:])
        return False
    [entry] = json.loads((out / "cache" / "peaks.json").read_text()).values()
    flops_sheet, bw_sheet = _datasheet(entry["device_name"])
    ok = True
    print(f"{'peak':<12} {'calibrated':>14} {'datasheet':>14} {'ratio':>7}  result")
    rows = [(d, v / 1e12, (flops_sheet or {}).get(d), "TFLOP/s")
            for d, v in sorted(entry["flops_per_s"].items())]
    rows.append(("bandwidth", entry["bytes_per_s"] / 1e9, bw_sheet, "GB/s"))
    for name, value, sheet, unit in rows:
        sheet_v = sheet / (1e12 if unit == "TFLOP/s" else 1e9) if sheet else None
        ratio = value / sheet_v if sheet_v else None
        passed = value > 0 and (ratio is None or 0.4 <= ratio <= 1.05)
        ok &= passed
        print(f"{name:<12} {value:>10.1f} {unit:<3} {sheet_v or float('nan'):>10.1f} "
              f"{'' if ratio is None else f'{ratio:>7.3f}'}  {'pass' if passed else 'MISS'}")
    print(f"  detail: {json.dumps(entry['detail'])}")

    spec = {**_op("torch.mm", _tensor([8192, 8192], "bfloat16"), _tensor([8192, 8192], "bfloat16"),
                  target={"metric": "flops_util", "value": 0.5}),
            **_op("torch.add", _tensor([1 << 28], "float"), _tensor([1 << 28], "float"),
                  target={"metric": "bw_util", "value": 0.5})}
    spec_path = out / "util.json"
    spec_path.write_text(json.dumps(spec))
    print(f"\n{'op':<10} {'mode':<11} {'median µs':>10} {'n':>6} {'CI ±':>7} {'TFLOP/s':>9} "
          f"{'GB/s':>8} {'flops_util':>10} {'bw_util':>8} {'bound':>8} {'target met':>10}  result")
    for mode in ("discrete", "continuous"):
        path = out / f"util_{mode}.json"
        done = cli("-c", str(spec_path), "-d", "cuda", "--exec-mode", mode, "-w", "5", "-i", "20",
                   "--warmup-time", "0.2", "--min-time", "0.5", "--output", str(path))
        if done.returncode != 0:
            print(done.stderr[-2000:])
            return False
        for record in records(path):
            stats, rates = record["stats"]["forward"], record["throughput"]["forward"]
            util = rates.get("flops_util") if record["op_name"] == "torch.mm" \
                else rates.get("bw_util")
            passed = util is not None and 0 < util <= 1.2 and stats["n"] >= 5
            ok &= passed
            print(f"{record['op_name']:<10} {mode:<11} {stats['median'] * 1e3:>10.1f} "
                  f"{stats['n']:>6} {stats['ci_rel_width'] / 2:>7.2%} "
                  f"{rates['tflops_per_s']:>9.1f} {rates['gb_per_s']:>8.1f} "
                  f"{rates.get('flops_util') or 0:>10.3f} {rates.get('bw_util') or 0:>8.3f} "
                  f"{rates.get('bound')!s:>8} {record['target']['met']!s:>10}  "
                  f"{'pass' if passed else 'MISS'}")

    verify_spec = {**_op("torch.add", _tensor([4096, 4096], "float"),
                         _tensor([4096, 4096], "float")),
                   **_op("torch.mm", _tensor([2048, 2048], "float"), _tensor([2048, 2048], "float")),
                   **_op("torch.relu", _tensor([4096, 4096], "float"))}
    bf16_spec = _op("torch.mm", _tensor([2048, 2048], "bfloat16"), _tensor([2048, 2048],
                                                                           "bfloat16"))
    (out / "verify.json").write_text(json.dumps(verify_spec))
    (out / "verify_bf16.json").write_text(json.dumps(bf16_spec))
    print(f"\n{'verify':<26} {'op':<10} {'status':>6} {'mean rel err':>13} {'max abs err':>12}"
          "  result")
    for label, spec_file, extra in (("--pt2-model --verify", "verify.json",
                                     ["--pt2-model", "--verify"]),
                                    ("--cuda-graph --verify", "verify.json",
                                     ["--cuda-graph", "--verify"]),
                                    ("--verify=fp64 (bf16)", "verify_bf16.json",
                                     ["--verify=fp64"])):
        path = out / f"verify_{label.split()[0].strip('-')}.json"
        done = cli("-c", str(out / spec_file), "-d", "cuda", "-w", "2", "-i", "10", *extra,
                   "--output", str(path))
        for record in records(path) if path.exists() else []:
            verdict = record.get("verify", {})
            passed = done.returncode == 0 and verdict.get("status") == "PASS"
            ok &= passed
            print(f"{label:<26} {record['op_name']:<10} {verdict.get('status')!s:>6} "
                  f"{verdict.get('mean_rel_error') or 0:>13.2e} "
                  f"{verdict.get('max_abs_error') or 0:>12.2e}  {'pass' if passed else 'MISS'}")
        if done.returncode != 0:
            ok = False
            print(done.stderr[-2000:])
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--skip-examples", action="store_true", help="skip part 1")
    parser.add_argument("--only-measure", action="store_true", help="run part 4 only")
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp())
    out.mkdir(parents=True, exist_ok=True)
    if not torch.cuda.is_available():
        print("no CUDA device")
        return 1
    print(f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}")
    only_measure = "--only-measure" in sys.argv
    ok = True
    if not only_measure:
        ok = check_examples(out)
        ok &= compare_timers(out)
        ok &= check_modes(out)
    ok &= check_measure(out)
    print("\nall checks pass" if ok else "\nMISS")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
